-- Every SQL statement reconciler runs, by name. Loaded once by reconciler/db/sqlfile.py.
-- Placeholders are psycopg's %(name)s. The schema is "scheduler" (see schemata.toml).

-- ============================================================== fragments
-- Written once here, substituted as text where a statement says {{name(argument)}} (see db/sqlfile.py).

-- fragment: of_sources(column)
-- An engine's sources (`engine --source`), `column` being a task's or a notification's source; none: every source.
(cardinality(%(sources)s::text[]) = 0 OR {column} = ANY(%(sources)s::text[]))

-- fragment: run_spec(task)
-- What an engine compiles a task from (`task` the alias of its tasks row): the stored spec, with the calendars
-- it names bound (TaskSpec.calendars) when it names any. Hashed, it keys the engine's cache of compiled specs.
(CASE WHEN {task}.calendars IS NULL THEN {task}.spec::text
      ELSE ({task}.spec || jsonb_build_object('calendars', {task}.calendars))::text END)

-- fragment: names_calendars(task)
-- Whether a task's stored spec names calendars (trigger.business_days, policy.blackouts).
({task}.spec -> 'trigger' ? 'business_days' OR {task}.spec -> 'policy' ? 'blackouts')

-- fragment: occurrence_busy(run)
-- Whether queued run `run` (the alias of its runs row) is a backfill run whose occurrence has another run in flight:
-- both would send the occurrence's Idempotency-Key, so it waits until that run ends (the claim checks again under
-- the task's lock: occurrences_in_flight). The runs in flight are as many as the leases: read once per statement
-- through runs_status_idx and hashed, however many runs are queued. A manual run's key is its own.
({run}.kind = 'backfill' AND ({run}.task_id, {run}.scheduled_for) IN (
    SELECT f.task_id, f.scheduled_for FROM scheduler.runs f WHERE f.status = 'running' AND f.kind <> 'manual'))

-- fragment: backfill_may_start(run)
-- Whether a queued run may start as far as the backfill rule goes (`run` the alias of its runs row, `t` of its
-- task's row in the statement; `{run}.busy` its occurrence_busy): anything but a backfill run may; a backfill run
-- only while no other run of its occurrence is in flight, its task has no pause
-- in force (a pause holds a backfill: it is an emergency stop) and when it is over (it holds its slot
-- hold_seconds at most) before the task's next occurrence, so a backfill never delays the schedule.
({run}.kind <> 'backfill'
 OR (NOT {run}.busy
     AND NOT EXISTS (SELECT 1 FROM scheduler.pauses p
                  WHERE p.task_id = t.id AND (p.paused_until IS NULL OR p.paused_until > COALESCE(%(now)s::timestamptz, now())))
     AND (t.next_run_at IS NULL OR NOT t.enabled
          OR COALESCE(%(now)s::timestamptz, now()) + make_interval(secs => COALESCE({run}.hold_seconds, 0)) <= t.next_run_at)))

-- fragment: max_running_instances(task)
-- A task's max_running_instances from its stored spec (`task` the alias of its tasks row): 1 unless a number,
-- at most 1,000,000 (a hand edit may store anything).
(CASE WHEN jsonb_typeof({task}.spec -> 'policy' -> 'max_running_instances') = 'number'
      THEN LEAST(({task}.spec -> 'policy' ->> 'max_running_instances')::numeric, 1000000)
      ELSE 1 END)

-- fragment: limits_of(task)
-- The limits (limits.d) a task's runs count against (`task` the alias of its tasks row): a JSON array of names, or NULL.
({task}.spec -> 'policy' -> 'limits')

-- fragment: limit_tokens(g)
-- The tokens in limit `g`'s bucket now (by the database's clock): as of refilled_at, refilled at the rate, at most
-- the bucket's size.
LEAST({g}.burst, {g}.tokens + {g}.rate_per_second
                 * GREATEST(0, extract(epoch FROM COALESCE(%(now)s::timestamptz, now()) - {g}.refilled_at)))

-- fragment: job_columns()
-- A run's job columns (docs/jobs.md), as the reads of whole runs list them after the run's head (db/command_queries.py's
-- JobColumns).
accepted_at, heartbeat_at, deadline_at, retry_at, progress, output

-- fragment: trace_hex()
-- A run's trace id as the W3C traceparent writes it (32 lowercase hex digits; NULL: a run from before traces).
replace(trace_id::text, '-', '')

-- fragment: limits_now()
-- Every limit as a claim sees it: full (no run may start: max_in_flight runs in flight, or less than a token in
-- its bucket) and, when full, when it may have room again (a token refilled, or the first lease to expire;
-- a run that finishes sooner wakes the engines by NOTIFY, see runs_finish_notify).
SELECT s.source, s.name, s.in_flight, s.tokens,
       (s.in_flight >= s.max_in_flight OR s.tokens < 1) AS full,
       GREATEST(CASE WHEN s.in_flight >= s.max_in_flight THEN s.lease_ends END,
                CASE WHEN s.tokens < 1
                     THEN COALESCE(%(now)s::timestamptz, now()) + make_interval(secs => (1 - s.tokens) / s.rate_per_second)
                END) AS frees_at
  FROM (SELECT g.source, g.name, g.max_in_flight, g.rate_per_second, f.in_flight, f.lease_ends,
               {{limit_tokens(g)}} AS tokens
          FROM scheduler.limits g
          -- its runs in flight (live leases of its source's tasks that name it) and the first lease to expire,
          -- from one reading of the leases
          CROSS JOIN LATERAL (
                SELECT count(*) AS in_flight, min(l.expires_at) AS lease_ends
                  FROM scheduler.run_leases l JOIN scheduler.tasks u ON u.id = l.task_id
                 WHERE l.expires_at > COALESCE(%(now)s::timestamptz, now()) AND u.source = g.source
                   AND {{limits_of(u)}} ? g.name) f) s

-- fragment: past_grace(task)
-- Whether a task's due occurrence is past its misfire grace, by the database's clock: a claim records it missed.
({{grace_end({task})}} < COALESCE(%(now)s::timestamptz, now()))

-- fragment: grace_end(task)
-- When a task's due occurrence passes its misfire grace (at least 1 s, as ON_TIME_SECONDS in catchup.py), `task`
-- the alias of its tasks row (a hand edit may store anything there).
({task}.next_run_at + make_interval(secs => GREATEST(1, CASE WHEN jsonb_typeof({task}.spec -> 'policy' -> 'misfire_grace_seconds') = 'number'
      THEN LEAST(({task}.spec -> 'policy' ->> 'misfire_grace_seconds')::numeric, 1e9)::float8 ELSE 60 END)))

-- fragment: in_partitions(r)
-- Only the partitions of runs (alias {r}) of %(scheduled)s, the scheduled_for of the runs a statement names by id: a
-- constant list, so the planner reads those partitions alone (NULL: every partition).
(%(scheduled)b::timestamptz[] IS NULL OR {r}.scheduled_for = ANY(%(scheduled)b::timestamptz[]))

-- fragment: limit_free(task)
-- Whether none of the limits a task names is full (`task` the alias of its tasks row, `lim` the statement's
-- limits_now()); a task that names none is always free.
({{limits_of({task})}} IS NULL
 OR NOT EXISTS (SELECT 1 FROM lim WHERE lim.full AND lim.source = {task}.source AND {{limits_of({task})}} ? lim.name))

-- name: catalog_table_columns
-- pg_attribute, unlike information_schema.columns, lists the columns of tables the role has
-- no privilege on: a least-privilege role must see an initialized schema as complete, or it
-- would try to create the tables it cannot read.
SELECT c.relname AS table_name, a.attname AS column_name
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped;

-- name: catalog_indexes
-- Each index's shape, to compare with its declaration: key columns in order (an expression is ''),
-- uniqueness, access method and predicate as PostgreSQL writes it back.
SELECT c.relname AS indexname, t.relname AS table_name, i.indisunique AS is_unique, am.amname = 'btree' AS btree,
       ARRAY(SELECT coalesce(a.attname, '')
               FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
               LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              ORDER BY k.n) AS columns,
       -- pg_get_indexdef, not pg_get_expr(indpred, indrelid): the latter locks the table, and a
       -- read command must not wait behind a migration's lock before its own bounded statements.
       substring(pg_get_indexdef(i.indexrelid) FROM ' WHERE (.*)$') AS predicate
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_am am ON am.oid = c.relam
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s;

-- name: catalog_checks
SELECT c.conname, pg_get_constraintdef(c.oid) AS definition
  FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
 WHERE n.nspname = %(schema)s AND c.contype = 'c';

-- name: catalog_partitions
-- The partitions of a partitioned table, with their bounds as timestamptz (a MINVALUE lower bound is NULL), and
-- whether a DETACH … CONCURRENTLY of one was interrupted (it is finished with FINALIZE).
SELECT c.relname AS name,
       CASE WHEN b.bound[1] = 'MINVALUE' THEN NULL ELSE btrim(b.bound[1], '''')::timestamptz END AS lower,
       btrim(b.bound[2], '''')::timestamptz AS upper,
       i.inhdetachpending AS detaching
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \((.*)\) TO \((.*)\)') AS b(bound)
 WHERE i.inhparent = to_regclass(%(table)s)
 ORDER BY 3;

-- name: catalog_partitioned
-- The schema's partitioned tables.
SELECT c.relname AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND c.relkind = 'p';

-- name: catalog_table_indexes
-- A table's indexes, and whether each backs a constraint (its primary key): a conversion renames or replaces them.
SELECT c.relname AS name, EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid) AS "constraint"
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = to_regclass(%(table)s);

-- name: catalog_grants
-- The privileges granted on a table and on its columns, but its owner's (grantee NULL: PUBLIC).
SELECT CASE WHEN a.grantee = 0 THEN NULL ELSE a.grantee::regrole::text END AS grantee, a.privilege_type AS privilege,
       NULL::text AS "column"
  FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
 WHERE c.oid = to_regclass(%(table)s) AND a.grantee <> c.relowner
UNION ALL
SELECT CASE WHEN a.grantee = 0 THEN NULL ELSE a.grantee::regrole::text END, a.privilege_type, t.attname::text
  FROM pg_attribute t CROSS JOIN LATERAL aclexplode(t.attacl) a
 WHERE t.attrelid = to_regclass(%(table)s) AND t.attacl IS NOT NULL;

-- name: partition_maintainer
-- Whether this role may create, detach and drop the partitions of a table: it owns it (or is a member of its owner).
SELECT pg_has_role(current_user, c.relowner, 'USAGE') AS allowed
  FROM pg_class c WHERE c.oid = to_regclass(%(table)s);

-- name: schema_fingerprint
-- The schema's comment: the fingerprint of the declaration it was last initialized from. Read
-- without locking any table, so a command behind a migration's lock waits only in its own,
-- bounded statements.
SELECT obj_description(oid, 'pg_namespace') AS fingerprint FROM pg_namespace WHERE nspname = %(schema)s;

-- name: catalog_schema
SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s;

-- name: lock_key
-- A transaction-scoped advisory lock: applies (and schema upgrades) serialize on it.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: tasks_all
-- xmin changes with every write to a row, ours or anyone's: it is the row's version for saved plans.
-- spec comes as text and is parsed only for rows that changed; tampered compares the digest apply wrote.
-- calendars is read from the whole row, of the tasks that name some only: a plan (which never writes) may
-- read a database an older reconciler made, without the column.
SELECT id, source, spec::text AS spec_text, spec_hash, enabled, timezone, next_run_at, xmin::text AS version,
       CASE WHEN spec_digest IS NULL THEN NULL ELSE md5(spec::text) <> spec_digest END AS tampered,
       CASE WHEN {{names_calendars(t)}} THEN to_jsonb(t) -> 'calendars' END AS calendars
  FROM scheduler.tasks t ORDER BY id;

-- name: limit_bucket_capped
-- After apply wrote a limit (files/limits.py: a new one starts with a full bucket): a changed one keeps its tokens,
-- at most its new bucket, so an apply never hands out a burst the limit would not have allowed.
UPDATE scheduler.limits SET tokens = LEAST(tokens, COALESCE(burst, 0))
 WHERE source = %(source)s AND name = %(name)s AND tokens > COALESCE(burst, 0);

-- name: notifications_end_deleted
-- With notifier_delete: its pending events end now, not at their next attempt (Retry-After may be an
-- hour away). A send in flight has its outcome dropped (notification_result wants 'pending').
UPDATE scheduler.notifications
   SET status = 'failed', next_attempt_at = now(),
       error = 'notifier ' || quote_literal(%(name)s::text) || ' is no longer in notifiers.d of source '
               || quote_literal(%(source)s::text) || ': deleted by an apply; not sent (add it back for later events)'
 WHERE source = %(source)s AND notifier = %(name)s AND status = 'pending';

-- name: task_insert
INSERT INTO scheduler.tasks (id, source, spec, spec_hash, spec_digest, enabled, timezone, next_run_at,
                             created_at, updated_at, revision, file_digest, calendars)
VALUES (%(id)s, %(source)s, %(spec)s::jsonb, %(spec_hash)s, md5((%(spec)s)::jsonb::text), %(enabled)s, %(timezone)s,
        %(next_run_at)s, %(now)s, %(now)s, %(revision)s,
        md5(%(digest)s || %(spec_hash)s || (%(spec)s)::jsonb::text), %(calendars)s::jsonb);

-- name: tasks_new_table
-- Many creates (a first apply) go by COPY into this table, then one INSERT … SELECT (tasks_insert_new).
CREATE TEMPORARY TABLE tasks_new (id text, source text, spec jsonb, spec_hash text, enabled boolean, timezone text,
                                  next_run_at timestamptz, revision text, digest text, calendars jsonb) ON COMMIT DROP;

-- name: tasks_new_copy
COPY tasks_new (id, source, spec, spec_hash, enabled, timezone, next_run_at, revision, digest, calendars) FROM STDIN;

-- name: tasks_insert_new
-- No ON CONFLICT: the plan saw none of these ids under the apply lock, so a conflict is a row
-- written outside reconciler meanwhile, and fails the apply as task_insert does.
INSERT INTO scheduler.tasks (id, source, spec, spec_hash, spec_digest, enabled, timezone, next_run_at,
                             created_at, updated_at, revision, file_digest, calendars)
SELECT id, source, spec, spec_hash, md5(spec::text), enabled, timezone, next_run_at, %(now)s, %(now)s, revision,
       md5(digest || spec_hash || spec::text), calendars
  FROM tasks_new;

-- name: task_update
-- keep_next: the schedule did not change, so next_run_at stays as the row has it when this UPDATE
-- gets its lock (an engine's claim may have advanced it since the plan read it); so does the limit its due
-- occurrence waits for (limit_wait), which a new next_run_at or a disabled task no longer has.
UPDATE scheduler.tasks
   SET id = %(id)s, spec = %(spec)s::jsonb, spec_hash = %(spec_hash)s, spec_digest = md5((%(spec)s)::jsonb::text),
       enabled = %(enabled)s, timezone = %(timezone)s,
       next_run_at = CASE WHEN %(keep_next)s THEN next_run_at ELSE %(next_run_at)s::timestamptz END,
       limit_wait = CASE WHEN %(keep_next)s AND %(enabled)s THEN limit_wait END,
       updated_at = %(now)s, revision = %(revision)s,
       file_digest = md5(%(digest)s || %(spec_hash)s || (%(spec)s)::jsonb::text), calendars = %(calendars)s::jsonb
 WHERE id = %(old_id)s;

-- name: tasks_lock
-- The rows an apply retimes, locked before it reads the clock (see apply.lock_retimed).
SELECT count(*) AS locked FROM (
    SELECT id FROM scheduler.tasks WHERE id = ANY(%(ids)s::text[]) ORDER BY id FOR UPDATE
) AS retimed;

-- name: apply_clock
-- The database's clock, not now(): the transaction began before it waited for the apply lock and
-- the row locks, and a retime is from when the apply may write.
SELECT clock_timestamp() AS now;

-- name: tasks_unchanged
-- What the files with these digests ({id: digest}) parsed to when applied, for the rows whose
-- file_digest still binds that digest to the row's spec_hash and spec (see schemata.toml).
-- One jsonb parameter, not two arrays: psycopg adapts 10,000-element arrays slowly.
SELECT t.id, f.digest, t.spec_hash, (t.spec ->> 'enabled')::boolean AS enabled, t.spec ->> 'timezone' AS timezone,
       t.spec ->> 'moved_from' AS moved_from
  FROM jsonb_each_text(%(digests)s) AS f(id, digest)
  JOIN scheduler.tasks t ON t.id = f.id
 WHERE t.file_digest = md5(f.digest || t.spec_hash || t.spec::text)
   -- A task that names calendars is always parsed: its calendars are bound from calendars.d (see Task.bind).
   AND NOT {{names_calendars(t)}};

-- name: tasks_seal
-- Rows an apply found equal to their file but without its digest (written by an older reconciler,
-- or before a parser change) get it; only those: a row already sealed is not rewritten, and a
-- spec edited by hand since the plan read it (spec_digest no longer matches) is not sealed.
UPDATE scheduler.tasks t SET file_digest = md5(f.digest || t.spec_hash || t.spec::text)
  FROM jsonb_each_text(%(digests)s) AS f(id, digest)
 WHERE t.id = f.id AND t.file_digest IS DISTINCT FROM md5(f.digest || t.spec_hash || t.spec::text)
   AND t.spec_digest = md5(t.spec::text);

-- name: runs_move
UPDATE scheduler.runs SET task_id = %(id)s WHERE task_id = %(old_id)s;

-- name: leases_move
UPDATE scheduler.run_leases SET task_id = %(id)s WHERE task_id = %(old_id)s;

-- name: task_delete
DELETE FROM scheduler.tasks WHERE id = %(id)s;

-- name: runs_queued_drop
-- With task_delete: the task's queued runs (manual, backfill) will never start; they end `skipped`, saying why.
UPDATE scheduler.runs SET status = 'skipped', finished_at = %(now)s, error = 'dropped: the task was deleted by an apply'
 WHERE task_id = %(id)s AND status = 'queued';

-- name: backfills_move
-- With runs_move: a moved task's backfills follow it (`backfill --list ID` of the new id).
UPDATE scheduler.backfills SET task_id = %(id)s WHERE task_id = %(old_id)s;

-- name: pause_delete
-- With task_delete: a deleted task's pause goes with it (a task re-created under its id is not paused).
DELETE FROM scheduler.pauses WHERE task_id = %(id)s;

-- name: pause_move
-- With runs_move: a moved task stays paused under its new id.
UPDATE scheduler.pauses SET task_id = %(id)s WHERE task_id = %(old_id)s;

-- name: applies_insert
INSERT INTO scheduler.applies (source, revision, author, message, reference, applied_at, counts, changes,
                               plan_digest)
VALUES (%(source)s, %(revision)s, %(author)s, %(message)s, %(reference)s, %(now)s, %(counts)s, %(changes)s,
        %(plan_digest)s)
RETURNING id;

-- name: applies_live
-- The live revision of a source: its newest apply's (NULL when that apply did not know one).
SELECT revision, applied_at FROM scheduler.applies
 WHERE source = %(source)s
 ORDER BY id DESC LIMIT 1;

-- name: applies_live_sources
-- `status`: each source's live revision.
SELECT DISTINCT ON (source) source, revision, applied_at, author
  FROM scheduler.applies
 ORDER BY source, id DESC;

-- name: applies_list
-- With a task id: the applies that created, changed, moved or deleted it (changes maps id → op).
SELECT id, source, revision, author, message, reference, applied_at, counts, plan_digest,
       CASE WHEN %(task_id)s::text IS NULL THEN NULL ELSE changes ->> %(task_id)s END AS op
  FROM scheduler.applies
 WHERE (%(source)s::text IS NULL OR source = %(source)s)
   AND (%(task_id)s::text IS NULL OR changes ? %(task_id)s)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- fragment: last_scheduled_run(task)
-- The run of a task's newest scheduled occurrence (`task` the alias of its tasks row): the schedule's runs
-- (scheduled, catchup, retry: runs_occurrence_uniq's, one per occurrence), never a manual or backfill run, whose
-- scheduled_for is when it was asked for, or a past occurrence. By task_id = ANY(ARRAY[...]) ORDER BY task_id,
-- scheduled_for: with an equality the planner may walk another index backwards and read a task's whole history;
-- this order only runs_occurrence_uniq gives with its predicate, so a task costs one index descent.
SELECT status, scheduled_for, started_at, finished_at, http_status, kind FROM scheduler.runs
 WHERE task_id = ANY(ARRAY[{task}.id]) AND kind NOT IN ('manual', 'backfill')
 ORDER BY task_id DESC, scheduled_for DESC LIMIT 1

-- name: notify_tasks
SELECT pg_notify('scheduler_tasks', %(payload)s);

-- name: status_rows
-- The last run of each task: the run of its newest scheduled occurrence (last_scheduled_run; a manual
-- or backfill run is not its schedule's: a backfill of last month is no "last run" 43 days late).
SELECT t.id, t.source, t.spec::text AS spec_text, t.spec_hash, t.enabled, t.timezone, t.next_run_at,
       t.xmin::text AS version,
       CASE WHEN t.spec_digest IS NULL THEN NULL ELSE md5(t.spec::text) <> t.spec_digest END AS tampered,
       r.status AS last_status, r.scheduled_for AS last_scheduled_for, r.finished_at AS last_finished_at, t.limit_wait
  FROM scheduler.tasks t
  LEFT JOIN LATERAL ({{last_scheduled_run(t)}}) r ON true
 ORDER BY t.id;

-- name: engines_live
-- Engines whose last heartbeat is at most %(seconds)s old, by the database's clock (heartbeats are written by it).
SELECT engine_id, host, pid, started_at, last_seen, database, server, is_primary, listen_connected,
       EXTRACT(EPOCH FROM now() - last_seen)::float8 AS heartbeat_age_seconds
  FROM scheduler.engines
 WHERE last_seen >= now() - make_interval(secs => %(seconds)s) ORDER BY engine_id;

-- name: read_limits
-- A read command's lock_timeout and statement_timeout for its transaction (SET LOCAL): the
-- defaults given where the setting is 0 (none from the server, the role or the connection); the
-- values in force, in ms (pg_settings' unit for both).
SELECT s.name, set_config(s.name, CASE WHEN s.setting = '0' THEN d.ms ELSE s.setting END, true) AS value,
       (CASE WHEN s.setting = '0' THEN d.ms ELSE s.setting END)::float8 AS ms
  FROM pg_settings s
  JOIN (VALUES ('lock_timeout', %(lock_ms)s::text), ('statement_timeout', %(statement_ms)s::text)) AS d(name, ms)
    ON d.name = s.name;

-- ============================================================== engine

-- name: clock_now
-- The claim's "now": the database's transaction time. %(now)s is NULL but in tests, which inject
-- their instant (run_once(now)). Every statement that judges time reads the same COALESCE, so the
-- engine's own clock never decides what is due, when a lease has expired or how late a claim is.
SELECT COALESCE(%(now)s::timestamptz, now()) AS now;

-- name: claim_due
-- The claim: due rows (by the database's clock), oldest first, skipping rows another replica holds.
-- %(sources)s scopes an engine (`engine --source`); empty: every source. A paused task is claimed too,
-- with its pause (NULLs when none): the claim records its due occurrences skipped and advances it.
-- A task waiting for a limit (limit_wait) is left alone while one of its limits is still full: it is not locked
-- and re-decided by every claim, nor does it fill the batch before the tasks behind it; unless its occurrence is
-- past its misfire grace (the claim records it missed for the limit).
WITH lim AS MATERIALIZED ({{limits_now()}})
SELECT t.id, hashtextextended({{run_spec(t)}}, 0) AS spec_key, t.next_run_at,
       p.paused_by, p.reason AS paused_reason, p.paused_until, t.source, {{limits_of(t)}} AS limits, t.limit_wait
  FROM scheduler.tasks t LEFT JOIN scheduler.pauses p ON p.task_id = t.id
 WHERE t.enabled AND t.next_run_at <= COALESCE(%(now)s::timestamptz, now())
   AND {{of_sources(t.source)}}
   AND (t.limit_wait IS NULL OR {{limit_free(t)}} OR {{past_grace(t)}})
 ORDER BY t.next_run_at
 FOR UPDATE OF t SKIP LOCKED
 LIMIT %(batch)s;

-- name: tasks_due_before
-- The engine validates the specs of soon-due tasks while it waits (see Claimer.warm).
SELECT id, hashtextextended({{run_spec(t)}}, 0) AS spec_key FROM scheduler.tasks t
 WHERE enabled AND next_run_at <= %(until)s
   AND {{of_sources(source)}}
 ORDER BY next_run_at
 LIMIT %(limit)s;

-- name: tasks_specs
SELECT id, {{run_spec(t)}} AS spec_text, hashtextextended({{run_spec(t)}}, 0) AS spec_key
  FROM scheduler.tasks t WHERE id = ANY(%(ids)b::text[]);

-- name: claim_queued
-- Queued runs: manual ones (`reconciler trigger`) and backfill ones, oldest first (manual runs before a
-- task's backfill runs), only as many of a task as it has free slots (max_running_instances less its live
-- leases): a run that must wait stays queued and does not take a place in the batch. The claim counts the
-- slots again under the task's lock; this is the cheap first cut. A backfill run starts only when it is
-- over before the task's next occurrence and no other run of its occurrence is in flight (see backfill_may_start).
-- The runs that may start are chosen first, from one reading of the queued runs (the places numbered once:
-- `q`), then locked by id. A backfill queues thousands of runs at once, before statistics know of them;
-- planned as one join, the queued runs were read again for each queued run (10,000: minutes per claim).
-- `place <= max_running_instances` before the lease count only saves counting for runs that cannot start.
-- A run whose task names a limit that is full stays queued (the claim decides under the limit's lock).
WITH lim AS MATERIALIZED ({{limits_now()}}), q AS MATERIALIZED (
    SELECT id, task_id, kind, hold_seconds, {{occurrence_busy(u)}} AS busy,
           -- a backfill run waiting for its occurrence's run in flight lets the backfill's next runs go first
           row_number() OVER (PARTITION BY task_id ORDER BY kind = 'backfill', {{occurrence_busy(u)}}, id) AS place
      FROM scheduler.runs u
     WHERE status = 'queued' AND (retry_at IS NULL OR retry_at <= COALESCE(%(now)s::timestamptz, now()))
)
SELECT r.id AS run_id, r.task_id, r.scheduled_for, r.kind, r.attempt, {{run_spec(t)}} AS spec_text,
       hashtextextended({{run_spec(t)}}, 0) AS spec_key, t.source, {{limits_of(t)}} AS limits,
       r.trace_id, r.traceparent
  FROM scheduler.runs r JOIN scheduler.tasks t ON t.id = r.task_id
 WHERE r.id = ANY(ARRAY(
        SELECT q.id FROM q JOIN scheduler.tasks t ON t.id = q.task_id
         WHERE {{of_sources(t.source)}}
           AND q.place <= {{max_running_instances(t)}}
           AND q.place <= {{max_running_instances(t)}}
                          - (SELECT count(*) FROM scheduler.run_leases l
                              WHERE l.task_id = q.task_id AND l.expires_at > COALESCE(%(now)s::timestamptz, now()))
           AND {{backfill_may_start(q)}}
           AND {{limit_free(t)}}))
   AND r.status = 'queued'
 ORDER BY r.id
 FOR UPDATE OF r SKIP LOCKED
 LIMIT %(batch)s;

-- name: run_cancel
-- `reconciler cancel`: only a queued run (a running one has left; its lease covers it).
UPDATE scheduler.runs SET status = 'skipped', finished_at = COALESCE(%(now)s::timestamptz, now()), error = %(error)s
 WHERE id = %(run_id)s AND status = 'queued'
RETURNING id, task_id;

-- name: run_get
SELECT id, task_id, scheduled_for, kind, status, attempt,
       {{job_columns()}},
       engine_id, claimed_at, started_at, finished_at, http_status, error, duration_ms, response_excerpt, backfill_id,
       {{trace_hex()}} AS trace_id
  FROM scheduler.runs WHERE id = %(run_id)s;

-- name: lock_tasks
-- Per-task advisory locks (sorted, so two claims never deadlock: volatile functions in the output
-- are evaluated after the sort) guarding the lease count. One row back, not one per task.
-- Arrays on the claim's and the result writer's path are sent in binary (placeholders ending in b): psycopg
-- formats a timestamp as text ~20× slower, which showed in every fire's profile.
SELECT count(*) AS locked FROM (
    SELECT pg_advisory_xact_lock(hashtextextended('reconciler.task:' || t, 0))
      FROM unnest(%(ids)b::text[]) AS t ORDER BY t
) AS locks;

-- name: leases_held
-- %(finished)s: runs this engine has finished whose results (and lease releases) are still being
-- written; their leases hold no slot.
SELECT task_id, count(*) AS held FROM scheduler.run_leases
 WHERE task_id = ANY(%(ids)b::text[]) AND expires_at > %(now)s AND run_id <> ALL(%(finished)b::bigint[])
 GROUP BY task_id;

-- name: runs_insert
-- The second guard: an occurrence already recorded is not inserted (and so not fired) again.
-- The runs that start take their leases in the same statement (%(lease_seconds)s per task id). %(trace_ids)s: each
-- run's trace id (32 hex digits, made by the engine from one read of its random source per claim: the database's
-- gen_random_uuid() cost more per run), stored for the runs that fire.
-- Returned: each inserted row's id and its place in the arrays (n, from 1), a tenth of the bytes
-- of the rows themselves, which a busy event loop reads in as many fewer turns.
WITH input AS (
    SELECT * FROM unnest(%(task_ids)b::text[], %(scheduled)b::timestamptz[], %(kinds)b::text[],
                         %(statuses)b::text[], %(errors)b::text[], %(trace_ids)b::text[])
           WITH ORDINALITY AS u(task_id, scheduled_for, kind, status, error, trace_id, n)
), inserted AS (
    INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, engine_id, claimed_at, finished_at, error,
                                trace_id)
    SELECT u.task_id, u.scheduled_for, u.kind, u.status, 0, %(engine_id)s, %(now)s,
           CASE WHEN u.status = 'running' THEN NULL ELSE %(now)s::timestamptz END, u.error,
           CASE WHEN u.status = 'running' THEN u.trace_id::uuid END
      FROM input u
    ON CONFLICT (task_id, scheduled_for) WHERE kind NOT IN ('manual', 'backfill') DO NOTHING
    RETURNING id, task_id, scheduled_for, status
), leased AS (
    INSERT INTO scheduler.run_leases (task_id, run_id, engine_id, expires_at, scheduled_for)
    SELECT i.task_id, i.id, %(engine_id)s, %(now)s::timestamptz + make_interval(secs => l.seconds), i.scheduled_for
      FROM inserted i
      JOIN unnest(%(lease_ids)b::text[], %(lease_seconds)b::float8[]) AS l(task_id, seconds) ON l.task_id = i.task_id
     WHERE i.status = 'running'
)
SELECT i.id, u.n FROM inserted i JOIN input u ON u.task_id = i.task_id AND u.scheduled_for = i.scheduled_for;

-- name: occurrences_in_flight
-- The claim's second look, under the tasks' locks, at the queued backfill runs it would start (%(task_ids)s,
-- %(scheduled)s: their occurrences): those of an occurrence with a run in flight, which stay queued (one
-- Idempotency-Key is never in flight twice). Each an index probe: runs_occurrence_uniq for the schedule's runs,
-- runs_backfill_idx for backfill runs (a manual run's key is its own).
SELECT u.task_id, u.scheduled_for
  FROM unnest(%(task_ids)b::text[], %(scheduled)b::timestamptz[]) AS u(task_id, scheduled_for)
 WHERE EXISTS (SELECT 1 FROM scheduler.runs r
                WHERE r.task_id = u.task_id AND r.scheduled_for = u.scheduled_for
                  AND r.kind NOT IN ('manual', 'backfill') AND r.status = 'running')
    OR EXISTS (SELECT 1 FROM scheduler.runs r
                WHERE r.task_id = u.task_id AND r.scheduled_for = u.scheduled_for
                  AND r.kind = 'backfill' AND r.status = 'running');

-- name: runs_start_queued
UPDATE scheduler.runs SET status = %(status)s, engine_id = %(engine_id)s, claimed_at = %(now)s,
       finished_at = CASE WHEN %(status)s = 'running' THEN NULL ELSE %(now)s::timestamptz END,
       error = %(error)s
 WHERE id = %(run_id)s;

-- name: leases_insert
INSERT INTO scheduler.run_leases (task_id, run_id, engine_id, expires_at, scheduled_for)
SELECT u.task_id, u.run_id, %(engine_id)s, %(now)s::timestamptz + make_interval(secs => u.seconds), u.scheduled_for
  FROM unnest(%(task_ids)b::text[], %(run_ids)b::bigint[], %(seconds)b::float8[], %(scheduled)b::timestamptz[])
       AS u(task_id, run_id, seconds, scheduled_for);

-- name: tasks_advance
-- The next occurrence of each task claimed, and the limit its due occurrence waits for (NULL: none).
UPDATE scheduler.tasks t SET next_run_at = u.next_run_at, limit_wait = u.limit_wait
  FROM unnest(%(ids)b::text[], %(nexts)b::timestamptz[], %(waits)b::text[]) AS u(id, next_run_at, limit_wait)
 WHERE t.id = u.id;

-- name: limits_lock
-- The claim's lock of the limits its tasks name (sorted, so two claims never deadlock; taken after the task locks,
-- as every claim does): while it is held nobody else starts a run of the limit or takes one of its tokens.
SELECT count(*) AS locked FROM (
    SELECT pg_advisory_xact_lock(hashtextextended('reconciler.limit:' || u.source || '/' || u.name, 0))
      FROM unnest(%(sources)b::text[], %(names)b::text[]) AS u(source, name) ORDER BY u.source, u.name
) AS locks;

-- name: limits_read
-- The limits locked, read after the lock (a statement of its own: its snapshot sees what the claim before
-- committed): runs in flight (not those of %(finished)s, this engine's runs whose results are being written:
-- their requests are over) and tokens, by the database's clock as the lock was taken (clock_timestamp(), not the
-- transaction's start: the requests leave right after). `at` is that instant, which limits_take writes back.
SELECT g.source, g.name, g.max_in_flight, g.rate_per_second, g.burst,
       (SELECT count(*) FROM scheduler.run_leases l JOIN scheduler.tasks u ON u.id = l.task_id
         WHERE l.expires_at > COALESCE(%(now)s::timestamptz, now()) AND u.source = g.source
           AND {{limits_of(u)}} ? g.name AND l.run_id <> ALL(%(finished)b::bigint[])) AS in_flight,
       COALESCE(LEAST(g.burst, g.tokens + g.rate_per_second
                      * GREATEST(0, extract(epoch FROM c.at - g.refilled_at))), 0)::float8 AS tokens,
       GREATEST(c.at, g.refilled_at) AS at
  FROM scheduler.limits g
  CROSS JOIN (SELECT COALESCE(%(now)s::timestamptz, clock_timestamp()) AS at) c
  JOIN unnest(%(sources)b::text[], %(names)b::text[]) AS u(source, name) ON u.source = g.source AND u.name = g.name;

-- name: limits_take
-- What a claim (or a retry's token, see limit_token) took from its limits: tokens left as of `at`, and the
-- occurrences it held back (delayed) or recorded missed because of a limit (the metrics' counters).
UPDATE scheduler.limits g
   SET tokens = u.tokens, refilled_at = u.at, delayed_total = g.delayed_total + u.delayed,
       missed_total = g.missed_total + u.missed
  FROM unnest(%(sources)b::text[], %(names)b::text[], %(tokens)b::float8[], %(ats)b::timestamptz[],
              %(delayed)b::bigint[], %(missed)b::bigint[]) AS u(source, name, tokens, at, delayed, missed)
 WHERE g.source = u.source AND g.name = u.name;

-- name: run_attempt
UPDATE scheduler.runs
   SET attempt = %(attempt)s, started_at = COALESCE(started_at, %(started_at)s), http_status = %(http_status)s,
       error = %(error)s, duration_ms = %(duration_ms)s, response_excerpt = %(excerpt)s
 WHERE id = %(run_id)s AND scheduled_for = %(scheduled_for)s;

-- name: runs_in_doubt
-- Runs this engine leased since %(since)s (its start, by the database's clock) that it does not know
-- of (%(known)s: those it is firing or holds results of): a claim whose COMMIT went through while
-- the connection died before the answer came back. Never fired: the engine fires only what a claim
-- it saw commit returned. With the seconds left on each lease. Not a job its target accepted (its lease a job's,
-- or accepted_at set): it was fired, and reports by itself.
SELECT r.id AS run_id, r.task_id, r.scheduled_for, r.kind, r.attempt, {{run_spec(t)}} AS spec_text,
       hashtextextended({{run_spec(t)}}, 0) AS spec_key, t.source,
       extract(epoch FROM l.expires_at - now())::float8 AS lease_left, r.trace_id, r.traceparent
  FROM scheduler.run_leases l
  JOIN scheduler.runs r ON r.id = l.run_id
  JOIN scheduler.tasks t ON t.id = r.task_id
 WHERE l.engine_id = %(engine_id)s AND r.status = 'running' AND r.claimed_at >= %(since)s
   AND l.expires_at > now() AND r.id <> ALL(%(known)b::bigint[]) AND NOT l.job AND r.accepted_at IS NULL
 ORDER BY r.id;

-- name: leases_expired
-- Leases expired by the database's clock: their engine died (or hung) while holding their runs, which
-- runs_mark_lost then records lost (a second statement, only when there are some: it names each run's partition).
-- A job's lease (job) is its deadline or heartbeat timeout: the upkeep ends it timed_out (jobs_overdue).
DELETE FROM scheduler.run_leases WHERE expires_at <= COALESCE(%(now)s::timestamptz, now()) AND NOT job
RETURNING run_id, engine_id, scheduled_for;

-- name: runs_mark_lost
-- The runs of expired leases (%(run_ids)s, their engines %(engines)s), recorded lost; %(scheduled)s, their
-- scheduled_for (NULL when a lease an older engine took does not say): each is read in its own partition. A lost
-- backfill run is queued again (same occurrence, same Idempotency-Key) unless its backfill was cancelled or
-- the occurrence was lost twice already: a backfill leaves no gap when engines are killed. (The count reads
-- the statement's snapshot, where the run lost now is still running.)
WITH expired AS (
    SELECT * FROM unnest(%(run_ids)b::bigint[], %(engines)b::text[]) AS e(run_id, engine_id)
), lost AS (
    UPDATE scheduler.runs r
       SET status = 'lost', finished_at = COALESCE(%(now)s::timestamptz, now()),
           error = 'lease expired: engine ' || e.engine_id || ' stopped before recording a result'
      FROM expired e
     WHERE r.id = e.run_id AND r.status = 'running' AND {{in_partitions(r)}}
    RETURNING r.id, r.task_id, r.scheduled_for, r.error, r.kind, r.backfill_id, r.hold_seconds
), requeued AS (
    INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at, backfill_id, hold_seconds,
                                trace_id)
    SELECT l.task_id, l.scheduled_for, 'backfill', 'queued', 0, COALESCE(%(now)s::timestamptz, now()),
           l.backfill_id, l.hold_seconds, gen_random_uuid()
      FROM lost l
     WHERE l.kind = 'backfill'
       AND NOT EXISTS (SELECT 1 FROM scheduler.backfills b WHERE b.id = l.backfill_id AND b.cancelled_at IS NOT NULL)
       AND (SELECT count(*) FROM scheduler.runs x
             WHERE x.task_id = l.task_id AND x.scheduled_for = l.scheduled_for AND x.kind = 'backfill'
               AND x.status = 'lost' AND {{in_partitions(x)}}) < 2
    ON CONFLICT (task_id, scheduled_for) WHERE kind = 'backfill' AND status IN ('queued', 'running') DO NOTHING
)
SELECT l.id, l.task_id, l.scheduled_for, l.error,
       (SELECT t.spec -> 'notify' FROM scheduler.tasks t WHERE t.id = l.task_id) AS notify
  FROM lost l;

-- name: engine_heartbeat
-- Returns the database's clock as the statement ran: the engine measures its own clock's offset from it.
INSERT INTO scheduler.engines (engine_id, host, pid, started_at, last_seen, database, server, is_primary,
                               listen_connected, keep_runs_days)
VALUES (%(engine_id)s, %(host)s, %(pid)s, COALESCE(%(now)s::timestamptz, now()), COALESCE(%(now)s::timestamptz, now()),
        %(database)s, host(inet_server_addr()) || ':' || inet_server_port(), NOT pg_is_in_recovery(), %(listening)s,
        %(keep_runs_days)s)
ON CONFLICT (engine_id) DO UPDATE SET last_seen = EXCLUDED.last_seen, host = EXCLUDED.host, pid = EXCLUDED.pid,
       database = EXCLUDED.database, server = EXCLUDED.server, is_primary = EXCLUDED.is_primary,
       listen_connected = EXCLUDED.listen_connected, keep_runs_days = EXCLUDED.keep_runs_days
RETURNING clock_timestamp() AS database_now;

-- name: engines_keep_runs_days
-- The --keep-runs-days of every other engine seen in the last 5 minutes (by the database's clock): partition
-- retention keeps history as long as the one that keeps it longest asks (NULL: keep every run).
SELECT keep_runs_days FROM scheduler.engines
 WHERE last_seen > now() - interval '5 minutes' AND engine_id <> %(engine_id)s;

-- name: engine_gone
DELETE FROM scheduler.engines WHERE engine_id = %(engine_id)s;

-- name: nearest_due
-- queued: a manual or backfill run this engine could start now (one waiting for a slot wakes the engine
-- through the NOTIFY the finishing engine sends, see runs_finish_notify). The queued runs are read once
-- through runs_status_idx and reduced to what decides (a 10,000-run backfill is one row): as an EXISTS over
-- the runs table, the planner scanned the whole table for queued rows that sit at its end.
-- A task waiting for a limit is due when every limit it names may have room again (limits_now's frees_at; now
-- when none is full: claim_due takes it then), or when its occurrence passes its misfire grace (to record it
-- missed); not at its next_run_at, which has passed: the engine sleeps until then instead of spinning. So is a
-- queued run whose limit is full.
WITH lim AS MATERIALIZED ({{limits_now()}}), queued AS MATERIALIZED (
    SELECT DISTINCT task_id, kind, hold_seconds, {{occurrence_busy(u)}} AS busy, retry_at
      FROM scheduler.runs u WHERE status = 'queued'
)
SELECT LEAST(
         (SELECT min(next_run_at) FROM scheduler.tasks
           WHERE enabled AND next_run_at IS NOT NULL AND limit_wait IS NULL AND {{of_sources(source)}}),
         (SELECT min(LEAST(GREATEST(t.next_run_at,
                                    COALESCE((SELECT max(lim.frees_at) FROM lim
                                               WHERE lim.full AND lim.source = t.source AND {{limits_of(t)}} ? lim.name),
                                             COALESCE(%(now)s::timestamptz, now()))),
                           {{grace_end(t)}} + interval '1 millisecond'))
            FROM scheduler.tasks t
           WHERE t.limit_wait IS NOT NULL AND t.enabled AND t.next_run_at IS NOT NULL AND {{of_sources(t.source)}}),
         (SELECT min(lim.frees_at) FROM lim
           WHERE lim.full AND EXISTS (SELECT 1 FROM queued r JOIN scheduler.tasks t ON t.id = r.task_id
                                       WHERE t.source = lim.source AND {{limits_of(t)}} ? lim.name
                                         AND {{of_sources(t.source)}})),
         -- a job's retry (job_retry)
         (SELECT min(r.retry_at) FROM queued r JOIN scheduler.tasks t ON t.id = r.task_id
           WHERE r.retry_at IS NOT NULL AND {{of_sources(t.source)}})
       ) AS next_run_at,
       COALESCE(%(now)s::timestamptz, now()) AS now,
       EXISTS (SELECT 1 FROM queued r JOIN scheduler.tasks t ON t.id = r.task_id
                WHERE {{backfill_may_start(r)}}
                  AND (r.retry_at IS NULL OR r.retry_at <= COALESCE(%(now)s::timestamptz, now()))
                  AND {{of_sources(t.source)}}
                  AND {{limit_free(t)}}
                  AND {{max_running_instances(t)}}
                      > (SELECT count(*) FROM scheduler.run_leases l
                          WHERE l.task_id = r.task_id AND l.expires_at > COALESCE(%(now)s::timestamptz, now()))) AS queued;

-- name: task_get
SELECT id, source, spec::text AS spec_text, spec_hash, enabled, timezone, next_run_at, xmin::text AS version,
       NULL::boolean AS tampered, created_at, updated_at, revision, to_jsonb(t) -> 'calendars' AS calendars,
       limit_wait
  FROM scheduler.tasks t WHERE id = %(id)s;

-- name: limits_named
-- The limits a task names, as `explain` and the dashboard show them (planner and dashboard roles: runs in flight
-- are its tasks' running runs, not the leases they cannot read).
SELECT g.name, g.max_in_flight, g.rate_per_second, g.burst,
       (SELECT count(*) FROM scheduler.runs r JOIN scheduler.tasks u ON u.id = r.task_id
         WHERE r.status = 'running' AND u.source = g.source AND {{limits_of(u)}} ? g.name) AS in_flight,
       {{limit_tokens(g)}}::float8 AS tokens
  FROM scheduler.limits g
 WHERE g.source = %(source)s AND g.name = ANY(%(names)s::text[])
 ORDER BY g.name;

-- name: run_queue_manual
-- %(traceparent)s: a caller's (`trigger --traceparent`, validated): the run is in its trace; NULL: a new trace.
INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at, trace_id, traceparent)
VALUES (%(task_id)s, COALESCE(%(now)s::timestamptz, now()), 'manual', 'queued', 0, COALESCE(%(now)s::timestamptz, now()),
        COALESCE(split_part(%(traceparent)s::text, '-', 2)::uuid, gen_random_uuid()), %(traceparent)s)
RETURNING id;

-- name: runs_list
-- Every task's runs, or one task's through its (task_id, id) index (the order only that index
-- gives, as in status_rows): the branch whose task_id does not apply is planned away.
SELECT * FROM (
    (SELECT id, task_id, scheduled_for, kind, status, attempt,
            {{job_columns()}},
            engine_id, claimed_at, started_at, finished_at, http_status, error, duration_ms, response_excerpt, backfill_id,
            {{trace_hex()}} AS trace_id
       FROM scheduler.runs
      WHERE %(task_id)s::text IS NULL AND (%(status)s::text IS NULL OR status = %(status)s)
      ORDER BY id DESC LIMIT %(limit)s)
    UNION ALL
    (SELECT id, task_id, scheduled_for, kind, status, attempt,
            {{job_columns()}},
            engine_id, claimed_at, started_at, finished_at, http_status, error, duration_ms, response_excerpt, backfill_id,
            {{trace_hex()}} AS trace_id
       FROM scheduler.runs
      WHERE task_id = ANY(ARRAY[%(task_id)s::text]) AND (%(status)s::text IS NULL OR status = %(status)s)
      ORDER BY task_id DESC, id DESC LIMIT %(limit)s)) AS listed
 ORDER BY id DESC;

-- name: due_backlog
SELECT count(*) AS due FROM scheduler.tasks
 WHERE enabled AND next_run_at <= COALESCE(%(now)s::timestamptz, now())
   AND {{of_sources(source)}};

-- name: task_health
-- Per enabled task, for the metrics: its next run, its last success, and whether its last
-- finished run (not counting skipped ones) failed or was lost: the newer of its newest success
-- (runs_task_success_idx) and its newest failed, lost or missed run (runs_task_unsuccessful_idx).
-- Two index descents per task, in the order only those indexes give (see status_rows).
SELECT t.id, t.next_run_at, s.finished_at AS last_success,
       CASE WHEN u.id > COALESCE(s.id, 0) THEN u.status IN ('failed', 'lost', 'timed_out')
            WHEN s.id IS NOT NULL THEN false END AS failing
  FROM scheduler.tasks t
  LEFT JOIN LATERAL (
        SELECT id, finished_at FROM scheduler.runs
         WHERE task_id = ANY(ARRAY[t.id]) AND status = 'succeeded'
         ORDER BY task_id DESC, id DESC LIMIT 1) s ON true
  LEFT JOIN LATERAL (
        SELECT id, status FROM scheduler.runs
         WHERE task_id = ANY(ARRAY[t.id]) AND status IN ('failed', 'lost', 'missed', 'timed_out')
         ORDER BY task_id DESC, id DESC LIMIT 1) u ON true
 WHERE t.enabled AND {{of_sources(t.source)}}
 ORDER BY t.id
 LIMIT %(limit)s;

-- name: engines_seen
-- Engines that sent a heartbeat in the last hour (one that died without saying goodbye stays
-- visible that long, for the alert on it).
SELECT engine_id, last_seen FROM scheduler.engines WHERE last_seen > COALESCE(%(now)s::timestamptz, now()) - interval '1 hour';

-- name: runs_finish_many
-- Results are written in batches; a late result still wins over `lost`: what happened is recorded.
UPDATE scheduler.runs r
   SET status = u.status, attempt = u.attempt, started_at = COALESCE(r.started_at, u.started_at),
       finished_at = u.finished_at, http_status = u.http_status, error = u.error,
       duration_ms = u.duration_ms, response_excerpt = u.excerpt
  FROM unnest(%(run_ids)b::bigint[], %(statuses)b::text[], %(attempts)b::int[], %(started)b::timestamptz[],
              %(finished)b::timestamptz[], %(http)b::int[], %(errors)b::text[], %(durations)b::int[],
              %(excerpts)b::text[])
       AS u(id, status, attempt, started_at, finished_at, http_status, error, duration_ms, excerpt)
 WHERE r.id = u.id AND r.status IN ('running', 'lost') AND {{in_partitions(r)}};

-- name: leases_release_many
DELETE FROM scheduler.run_leases WHERE run_id = ANY(%(run_ids)b::bigint[]);

-- name: runs_finish_notify
-- A freed slot wakes the engines when a manual run of that task is waiting for one, or when the run's task
-- names a limit (its slot in the limit is free) while a task waits for a limit or a run is queued.
SELECT pg_notify('scheduler_tasks', '{"source": "slot"}')
 WHERE EXISTS (SELECT 1 FROM scheduler.runs r JOIN scheduler.runs q ON q.task_id = r.task_id
                WHERE r.id = ANY(%(run_ids)b::bigint[]) AND {{in_partitions(r)}} AND q.status = 'queued')
    OR (EXISTS (SELECT 1 FROM scheduler.runs r JOIN scheduler.tasks t ON t.id = r.task_id
                 WHERE r.id = ANY(%(run_ids)b::bigint[]) AND {{in_partitions(r)}} AND t.spec -> 'policy' ? 'limits')
        AND (EXISTS (SELECT 1 FROM scheduler.tasks w WHERE w.limit_wait IS NOT NULL)
             OR EXISTS (SELECT 1 FROM scheduler.runs q WHERE q.status = 'queued')));

-- name: notify_state_ensure
-- The failing state of tasks whose runs just ended (see notify.py); sorted ids, so replicas lock alike.
INSERT INTO scheduler.notify_state (task_id) SELECT unnest(%(ids)s::text[]) ON CONFLICT DO NOTHING;

-- name: notify_state_lock
SELECT task_id, failing, failure_sent_at FROM scheduler.notify_state
 WHERE task_id = ANY(%(ids)s::text[]) ORDER BY task_id FOR UPDATE;

-- name: notify_state_reset
-- By apply: tasks deleted, created, moved, or whose failure/recovery/lost subscribers changed.
DELETE FROM scheduler.notify_state WHERE task_id = ANY(%(ids)s::text[]);

-- name: notify_state_save
UPDATE scheduler.notify_state s SET failing = u.failing, failure_sent_at = u.sent, changed_at = %(now)s
  FROM unnest(%(ids)s::text[], %(failing)s::boolean[], %(sent)s::timestamptz[]) AS u(id, failing, sent)
 WHERE s.task_id = u.id;

-- name: notifications_insert
-- One row per event and subscribed notifier, owned by the task's source (whose notifiers.d it names).
-- A `late` event already raised for the occurrence is not raised again (notifications_late_uniq).
INSERT INTO scheduler.notifications (source, notifier, task_id, event, run_id, scheduled_for, payload,
                                     created_at, next_attempt_at)
SELECT t.source, u.notifier, u.task_id, u.event, u.run_id, u.scheduled_for, u.payload::jsonb, %(now)s, %(now)s
  FROM unnest(%(task_ids)s::text[], %(notifiers)s::text[], %(events)s::text[], %(run_ids)s::bigint[],
              %(scheduled)s::timestamptz[], %(payloads)s::text[])
       AS u(task_id, notifier, event, run_id, scheduled_for, payload)
  JOIN scheduler.tasks t ON t.id = u.task_id
ON CONFLICT DO NOTHING;

-- name: notifications_claim
-- Due notifications of the engine's sources (every source's when it has none; the secrets of a
-- source's notifiers are in its engines' environment) for this engine to send: moved past the
-- send's deadline (a lease) so no other engine sends them meanwhile; rows another engine is
-- claiming are skipped, not waited for. At most per_notifier of one notifier's are sent at once by
-- an engine (`sending`: its sends in flight per source/notifier), so one that hangs holds few slots.
UPDATE scheduler.notifications n
   SET attempts = n.attempts + 1, engine_id = %(engine_id)s,
       next_attempt_at = COALESCE(%(now)s::timestamptz, now()) + make_interval(secs => COALESCE((due.spec ->> 'timeout_seconds')::float8, 60)
                                                         + %(lease)s)
  FROM (SELECT d.id, f.spec
          FROM (SELECT id, source, notifier FROM scheduler.notifications
                 WHERE id IN (SELECT id
                                FROM (SELECT id, source, notifier,
                                             row_number() OVER (PARTITION BY source, notifier
                                                                ORDER BY next_attempt_at, id) AS nth
                                        FROM scheduler.notifications
                                       WHERE status = 'pending' AND next_attempt_at <= COALESCE(%(now)s::timestamptz, now())
                                         AND {{of_sources(source)}}) ranked
                               WHERE nth <= %(per_notifier)s
                                            - COALESCE((%(sending)s::jsonb ->> (source || '/' || notifier))::int, 0))
                   AND status = 'pending' AND next_attempt_at <= COALESCE(%(now)s::timestamptz, now())
                 ORDER BY next_attempt_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) d
          LEFT JOIN scheduler.notifiers f ON f.source = d.source AND f.name = d.notifier) due
 WHERE n.id = due.id
RETURNING n.id, n.source, n.notifier, n.task_id, n.event, n.payload, n.attempts, n.scheduled_for, n.created_at,
          due.spec;

-- name: notification_result
UPDATE scheduler.notifications
   SET status = %(status)s, next_attempt_at = %(next)s, http_status = %(http_status)s, error = %(error)s,
       delivered_at = CASE WHEN %(status)s::text = 'delivered' THEN %(now)s::timestamptz END
 WHERE id = %(id)s AND engine_id = %(engine_id)s AND status = 'pending';

-- name: notifications_release
-- At an engine's stop: the sends it cut off are due again at once for any engine, the attempt not counted.
UPDATE scheduler.notifications
   SET attempts = greatest(attempts - 1, 0), next_attempt_at = %(now)s, engine_id = NULL
 WHERE id = ANY(%(ids)s::bigint[]) AND engine_id = %(engine_id)s AND status = 'pending';

-- name: tasks_late
-- The dead-man's switch: occurrences still unclaimed late_after_seconds (default the misfire grace,
-- at least LATE_FLOOR_SECONDS) after they were due, of tasks with `late` subscribers, not yet notified.
-- Reads tasks_late_idx: only the tasks with `late` subscribers that are due (every threshold is
-- positive, so a late occurrence is due), not every task.
SELECT t.id, t.next_run_at, t.spec -> 'notify' -> 'late' AS late, COALESCE(%(now)s::timestamptz, now()) AS now
  FROM scheduler.tasks t
 WHERE t.enabled AND t.next_run_at IS NOT NULL AND jsonb_typeof(t.spec -> 'notify' -> 'late') = 'array'
   AND t.next_run_at < COALESCE(%(now)s::timestamptz, now()) AND jsonb_array_length(t.spec -> 'notify' -> 'late') > 0
   AND t.next_run_at < COALESCE(%(now)s::timestamptz, now())
                       - make_interval(secs => COALESCE((t.spec -> 'notify' ->> 'late_after_seconds')::float8,
                                                                GREATEST((t.spec -> 'policy' ->> 'misfire_grace_seconds')::float8,
                                                                         %(floor)s)))
   AND NOT EXISTS (SELECT 1 FROM scheduler.notifications n
                    WHERE n.task_id = t.id AND n.event = 'late' AND n.scheduled_for = t.next_run_at)
   -- a paused occurrence is not late: no engine is meant to fire it
   AND NOT EXISTS (SELECT 1 FROM scheduler.pauses p
                    WHERE p.task_id = t.id AND (p.paused_until IS NULL OR p.paused_until > t.next_run_at))
 LIMIT 1000;

-- name: runs_prune_keep
-- policy.keep_runs: finished runs beyond the newest N of each task (running and queued ones stay).
DELETE FROM scheduler.runs WHERE id IN (
    SELECT old.id
      FROM scheduler.tasks t
      CROSS JOIN LATERAL (
            SELECT id FROM scheduler.runs
             WHERE task_id = t.id AND status NOT IN ('queued', 'running')
             ORDER BY id DESC
            OFFSET LEAST((t.spec -> 'policy' ->> 'keep_runs')::numeric, 1000000000)::bigint
             LIMIT %(batch)s) old
     WHERE jsonb_typeof(t.spec -> 'policy' -> 'keep_runs') = 'number'
       AND {{of_sources(t.source)}}
     LIMIT %(batch)s);

-- name: notifications_prune_age
-- --keep-runs-days for the outbox: delivered and given-up notifications older than the cut-off,
-- of the engine's sources (every source's when it has none); pending ones stay.
DELETE FROM scheduler.notifications WHERE id IN (
    SELECT id FROM scheduler.notifications
     WHERE created_at < %(before)s AND status <> 'pending'
       AND {{of_sources(source)}}
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED);

-- name: audit_prune_age
-- --keep-runs-days for the audit log, of the engine's sources (every source's, and the rows of actions on
-- several sources, when it has none). No FOR UPDATE: it would need UPDATE on the table, and the engine
-- must not be able to rewrite an audit row; replicas deleting the same rows wait for each other briefly.
-- Never a row younger than %(floor_days)s days by the database's clock, whatever --keep-runs-days says: the
-- engine role's DELETE of one is refused (the trigger `db grants` installs, see db/grants.py).
DELETE FROM scheduler.audit WHERE id IN (
    SELECT id FROM scheduler.audit
     WHERE at < LEAST(%(before)s::timestamptz, now() - make_interval(days => %(floor_days)s))
       AND {{of_sources(source)}}
     ORDER BY at
     LIMIT %(batch)s);

-- name: runs_between
-- The runs `explain` shows: scheduled (or requested, for manual runs) in [lo, hi]. Three parts, so
-- each reads its index (runs_occurrence_uniq, runs_backfill_idx, runs_manual_idx) rather than all of
-- the task's runs.
SELECT id, task_id, scheduled_for, kind, status, attempt,
       {{job_columns()}},
       engine_id, claimed_at, http_status, error, response_excerpt, backfill_id
  FROM scheduler.runs
 WHERE task_id = %(task_id)s AND kind NOT IN ('manual', 'backfill') AND scheduled_for BETWEEN %(lo)s AND %(hi)s
UNION ALL
SELECT id, task_id, scheduled_for, kind, status, attempt,
       {{job_columns()}},
       engine_id, claimed_at, http_status, error, response_excerpt, backfill_id
  FROM scheduler.runs
 WHERE task_id = %(task_id)s AND kind = 'backfill' AND scheduled_for BETWEEN %(lo)s AND %(hi)s
UNION ALL
SELECT id, task_id, scheduled_for, kind, status, attempt,
       {{job_columns()}},
       engine_id, claimed_at, http_status, error, response_excerpt, backfill_id
  FROM scheduler.runs
 WHERE task_id = %(task_id)s AND kind = 'manual' AND scheduled_for BETWEEN %(lo)s AND %(hi)s
 ORDER BY scheduled_for, id;

-- notifications: metrics

-- name: limits_health
-- The metrics of every limit of the engine's sources: runs in flight, tokens, tasks waiting for it, and its
-- counters of occurrences delayed and missed for it.
WITH lim AS MATERIALIZED ({{limits_now()}})
SELECT lim.source, lim.name, lim.in_flight, COALESCE(lim.tokens, 0)::float8 AS tokens, g.rate_per_second,
       (SELECT count(*) FROM scheduler.tasks t
         WHERE t.limit_wait = lim.name AND t.source = lim.source AND t.enabled) AS waiting,
       g.delayed_total, g.missed_total
  FROM lim JOIN scheduler.limits g ON g.source = lim.source AND g.name = lim.name
 WHERE {{of_sources(lim.source)}}
 ORDER BY lim.source, lim.name;

-- name: notifications_health
-- The outbox of the engine's sources (every source's when it has none), for the metrics: rows
-- pending (due or waiting for a retry), rows that gave up among those created in the last day,
-- and how long the longest-waiting due row has been due (a row being sent or waiting for its retry
-- is not due; one never tried is due since it was written): 0 when none is.
-- Each part reads an index (notifications_due_idx, notifications_created_idx), not the whole outbox.
WITH mine AS (SELECT cardinality(%(sources)s::text[]) = 0 AS every)
SELECT (SELECT count(*) FROM scheduler.notifications, mine
         WHERE status = 'pending' AND (every OR source = ANY(%(sources)s::text[]))) AS pending,
       (SELECT count(*) FROM scheduler.notifications, mine
         WHERE created_at > %(now)s - interval '1 day' AND status = 'failed'
           AND (every OR source = ANY(%(sources)s::text[]))) AS failed,
       COALESCE((SELECT EXTRACT(EPOCH FROM %(now)s - min(next_attempt_at)) FROM scheduler.notifications, mine
                  WHERE status = 'pending' AND next_attempt_at <= %(now)s
                    AND (every OR source = ANY(%(sources)s::text[]))), 0) AS oldest_due_seconds;

-- notifications: commands

-- name: notifications_list
-- `reconciler notifications`: the outbox, newest first.
SELECT id, created_at, source, task_id, event, notifier, run_id, scheduled_for, status, attempts,
       next_attempt_at, delivered_at, http_status, error, engine_id
  FROM scheduler.notifications
 WHERE (%(task_id)s::text IS NULL OR task_id = %(task_id)s)
   AND (%(status)s::text IS NULL OR status = %(status)s)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: notifications_readable
-- Whether this role may read the outbox: a database, or a role's grants, older than notifications has none.
SELECT coalesce(has_table_privilege(to_regclass('scheduler.notifications'), 'SELECT'), false) AS readable;

-- name: notifications_of_runs
-- The notifications the runs `runs` and `explain` show caused, one query for all of them.
SELECT id, run_id, notifier, event, status, attempts, http_status, error, created_at, delivered_at
  FROM scheduler.notifications
 WHERE run_id = ANY(%(run_ids)s::bigint[])
 ORDER BY run_id, id;

-- ============================================================== leader leases

-- name: leader_take
-- Take the lease when it is free or expired, or renew it when it is ours; a row back: we lead
-- for %(seconds)s more seconds of the database's clock (now(): one statement, any connection).
INSERT INTO scheduler.leader AS l (name, engine_id, expires_at)
VALUES (%(name)s, %(engine_id)s, now() + make_interval(secs => %(seconds)s))
ON CONFLICT (name) DO UPDATE SET engine_id = EXCLUDED.engine_id, expires_at = EXCLUDED.expires_at
 WHERE l.expires_at < now() OR l.engine_id = EXCLUDED.engine_id
RETURNING l.engine_id;

-- name: leader_release
-- A lease given back by its holder before it expires (a pass of partition maintenance, over).
DELETE FROM scheduler.leader WHERE name = %(name)s AND engine_id = %(engine_id)s;

-- name: tasks_present
-- Which of the task ids the metrics count runs of still exist in the engine's sources (one
-- jsonb array: psycopg adapts long text arrays slowly).
SELECT id FROM scheduler.tasks
 WHERE id IN (SELECT jsonb_array_elements_text(%(ids)s))
   AND {{of_sources(source)}};

-- ============================================================== pauses and the audit log

-- name: pauses_in_force
-- The pauses in force by the database's clock (not past their paused_until), of tasks `ids` (NULL: all).
SELECT task_id, paused_at, paused_by, reason, paused_until
  FROM scheduler.pauses
 WHERE (paused_until IS NULL OR paused_until > now())
   AND (%(ids)s::text[] IS NULL OR task_id = ANY(%(ids)s::text[]))
 ORDER BY task_id;

-- name: operator_tasks
-- The tasks an operator command names: by id, or every task of a source; with each one's pause (in
-- force or not: NULLs when none) and the database's clock. Locked, so that a claim holding one commits
-- first and a resume's "from now" comes after it.
SELECT t.id, t.source, {{run_spec(t)}} AS spec_text, t.enabled, t.next_run_at,
       p.paused_at, p.paused_by, p.reason AS paused_reason, p.paused_until,
       p.task_id IS NOT NULL AND (p.paused_until IS NULL OR p.paused_until > clock_timestamp()) AS in_force
  FROM scheduler.tasks t LEFT JOIN scheduler.pauses p ON p.task_id = t.id
 WHERE t.id = ANY(%(ids)s::text[]) OR t.source = %(source)s::text
 ORDER BY t.id
 FOR UPDATE OF t;

-- name: pause_upsert
-- `reconciler pause`: a new pause from now, or the one in force updated (who, why, until; since when stays).
INSERT INTO scheduler.pauses AS p (task_id, paused_at, paused_by, reason, paused_until)
SELECT u.id, clock_timestamp(), %(actor)s, %(reason)s, %(until)s FROM unnest(%(ids)s::text[]) AS u(id)
ON CONFLICT (task_id) DO UPDATE
   SET paused_by = EXCLUDED.paused_by, reason = EXCLUDED.reason, paused_until = EXCLUDED.paused_until,
       paused_at = CASE WHEN p.paused_until IS NULL OR p.paused_until > EXCLUDED.paused_at THEN p.paused_at
                        ELSE EXCLUDED.paused_at END;

-- name: pauses_clear
-- `reconciler resume`: the pauses of tasks `ids` gone (in force or ended).
DELETE FROM scheduler.pauses WHERE task_id = ANY(%(ids)s::text[]);

-- name: audit_insert
INSERT INTO scheduler.audit (actor, action, source, task_ids, reason, details)
VALUES (%(actor)s, %(action)s, %(source)s, %(task_ids)s::text[], %(reason)s, %(details)s)
RETURNING id;

-- name: audit_list
-- `reconciler audit [ID]`: every operator action, newest first (those that named ID).
SELECT id, at, actor, action, source, task_ids, reason, details
  FROM scheduler.audit
 WHERE %(task_id)s::text IS NULL OR %(task_id)s::text = ANY(task_ids)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: tables_readable
-- Which of these tables of schema scheduler this role may read (a database, or a role's grants, from
-- before a table existed has none).
SELECT name FROM unnest(%(names)s::text[]) AS name
 WHERE coalesce(has_table_privilege(to_regclass('scheduler.' || name), 'SELECT'), false);

-- ============================================================== backfill

-- name: backfill_lock
-- A backfill queues its runs under its task's row lock: two backfills of one task serialize, and no claim
-- advances the task while one reads next_run_at (claims skip the locked row for that moment).
SELECT id FROM scheduler.tasks WHERE id = %(id)s FOR UPDATE;

-- name: backfill_task
-- The task as an engine compiles it (run_spec), its pause in force (NULLs: none), and the database's clock.
SELECT t.id, t.source, t.enabled, t.next_run_at, {{run_spec(t)}} AS spec_text, now() AS now,
       p.paused_by, p.reason AS paused_reason, p.paused_until
  FROM scheduler.tasks t
  LEFT JOIN scheduler.pauses p ON p.task_id = t.id AND (p.paused_until IS NULL OR p.paused_until > now())
 WHERE t.id = %(id)s;

-- name: backfill_runs
-- The newest run (but manual ones) of each instant of [lo, hi) of a task that has any: what --reprocess
-- decides by. Two parts, so each reads its index (runs_occurrence_uniq, runs_backfill_idx): `kind <> 'manual'`
-- matches neither partial index, and a task's whole history would be read.
SELECT DISTINCT ON (scheduled_for) scheduled_for, id, kind, status, backfill_id FROM (
    SELECT scheduled_for, id, kind, status, backfill_id FROM scheduler.runs
     WHERE task_id = %(task_id)s AND kind NOT IN ('manual', 'backfill')
       AND scheduled_for >= %(lo)s AND scheduled_for < %(hi)s
    UNION ALL
    SELECT scheduled_for, id, kind, status, backfill_id FROM scheduler.runs
     WHERE task_id = %(task_id)s AND kind = 'backfill' AND scheduled_for >= %(lo)s AND scheduled_for < %(hi)s
) AS occurrence_runs
 ORDER BY scheduled_for, id DESC;

-- name: backfill_insert
INSERT INTO scheduler.backfills (task_id, source, range_from, range_to, reprocess, actor, reason, queued)
VALUES (%(task_id)s, %(source)s, %(range_from)s, %(range_to)s, %(reprocess)s, %(actor)s, %(reason)s, %(queued)s)
RETURNING id;

-- name: backfill_queue
-- The backfill's runs, oldest first (ids ascending: claims start them in that order). An occurrence with a
-- backfill run queued or running already is not queued twice (runs_backfill_pending_uniq).
INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at, backfill_id, hold_seconds, trace_id)
SELECT %(task_id)s, u.at, 'backfill', 'queued', 0, now(), %(backfill_id)s, %(hold_seconds)s, gen_random_uuid()
  FROM unnest(%(scheduled)s::timestamptz[]) WITH ORDINALITY AS u(at, n)
 ORDER BY u.n
ON CONFLICT (task_id, scheduled_for) WHERE kind = 'backfill' AND status IN ('queued', 'running') DO NOTHING
RETURNING scheduled_for;

-- name: backfills_list
-- Backfills, newest first (of task %(task_id)s when given), with the counts of their occurrences by the
-- status of each one's newest run (a backfill run ends `skipped` only when dropped by a cancel); %(id)s:
-- that one only.
SELECT b.id, b.task_id, b.source, b.range_from, b.range_to, b.reprocess, b.actor, b.reason, b.queued,
       b.created_at, b.cancelled_at, b.cancelled_by,
       COALESCE(c.waiting, 0) AS waiting, COALESCE(c.running, 0) AS running,
       COALESCE(c.succeeded, 0) AS succeeded, COALESCE(c.unsuccessful, 0) AS unsuccessful,
       COALESCE(c.dropped, 0) AS dropped
  FROM scheduler.backfills b
  LEFT JOIN LATERAL (
        SELECT count(*) FILTER (WHERE status = 'queued') AS waiting,
               count(*) FILTER (WHERE status = 'running') AS running,
               count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE status IN ('failed', 'missed', 'lost', 'timed_out')) AS unsuccessful,
               count(*) FILTER (WHERE status = 'skipped') AS dropped
          FROM (SELECT DISTINCT ON (scheduled_for) status FROM scheduler.runs
                 WHERE backfill_id = b.id ORDER BY scheduled_for, id DESC) AS newest) c ON true
 WHERE (%(task_id)s::text IS NULL OR b.task_id = %(task_id)s) AND (%(id)s::bigint IS NULL OR b.id = %(id)s)
 ORDER BY b.id DESC
 LIMIT %(limit)s;

-- name: backfill_unsuccessful
-- A backfill's occurrences whose newest run ended but not in success (nor was dropped), oldest first, with why.
SELECT scheduled_for, id, status, http_status, error FROM (
    SELECT DISTINCT ON (scheduled_for) scheduled_for, id, status, http_status, error
      FROM scheduler.runs WHERE backfill_id = %(id)s ORDER BY scheduled_for, id DESC) AS newest
 WHERE status IN ('failed', 'missed', 'lost', 'timed_out')
 ORDER BY scheduled_for
 LIMIT %(limit)s;

-- name: backfill_cancel_lock
SELECT id, task_id, source, cancelled_at FROM scheduler.backfills WHERE id = %(id)s FOR UPDATE;

-- name: backfill_drop
-- `backfill --cancel N`: its runs still queued end `skipped` (never attempted; kept, as `reconciler cancel`
-- keeps a manual run it cancels); runs in flight finish. A run a claim holds is waited for, then seen running
-- and left. The count of runs dropped.
WITH gone AS (
    UPDATE scheduler.runs SET status = 'skipped', finished_at = now(), error = %(error)s
     WHERE backfill_id = %(id)s AND status = 'queued'
    RETURNING id
), marked AS (
    UPDATE scheduler.backfills SET cancelled_at = now(), cancelled_by = %(actor)s WHERE id = %(id)s
)
SELECT count(*)::integer AS dropped FROM gone;

-- name: backfill_stall
-- `backfill --wait` when no run ended for a while: what holds backfill %(id)s's oldest queued run (else its
-- oldest running one), as claim_queued and backfill_may_start decide: live engines (a heartbeat at most
-- %(live_seconds)s old), the task's pause in force, its limits with no room, its slots (leases in flight, queued
-- runs ahead of it), room before its next occurrence, another run of its occurrence in flight.
WITH lim AS MATERIALIZED ({{limits_now()}})
SELECT COALESCE(%(now)s::timestamptz, now()) AS now,
       (SELECT count(*) FROM scheduler.engines
         WHERE last_seen >= COALESCE(%(now)s::timestamptz, now()) - make_interval(secs => %(live_seconds)s))::integer
           AS engines,
       t.id AS task_id, t.enabled, t.next_run_at, {{max_running_instances(t)}}::integer AS slots,
       (SELECT count(*) FROM scheduler.run_leases l
         WHERE l.task_id = t.id AND l.expires_at > COALESCE(%(now)s::timestamptz, now()))::integer AS in_flight,
       (SELECT count(*) FROM scheduler.runs a
         WHERE a.task_id = t.id AND a.status = 'queued'
           AND (a.kind <> 'backfill' OR a.id < r.id))::integer AS ahead,
       p.paused_by, p.reason AS paused_reason, p.paused_until,
       r.id AS run_id, r.status, r.scheduled_for, COALESCE(r.hold_seconds, 0)::float8 AS hold_seconds,
       (SELECT count(*) FROM scheduler.runs b WHERE b.backfill_id = %(id)s AND b.status = 'running')::integer
           AS running,
       ARRAY(SELECT lim.name FROM lim
              WHERE lim.full AND lim.source = t.source AND {{limits_of(t)}} ? lim.name ORDER BY lim.name) AS full_limits,
       (SELECT o.id FROM scheduler.runs o
         WHERE o.task_id = t.id AND o.scheduled_for = r.scheduled_for AND o.status = 'running' AND o.id <> r.id
         ORDER BY o.id LIMIT 1) AS occurrence_run
  FROM scheduler.runs r JOIN scheduler.tasks t ON t.id = r.task_id
  LEFT JOIN scheduler.pauses p
    ON p.task_id = t.id AND (p.paused_until IS NULL OR p.paused_until > COALESCE(%(now)s::timestamptz, now()))
 WHERE r.backfill_id = %(id)s AND r.status IN ('queued', 'running')
 ORDER BY r.status <> 'queued', r.id
 LIMIT 1;

-- ============================================================== dashboard
-- Read-only, each through an index, each page bounded by %(limit)s (docs/dashboard.md).

-- name: dashboard_tasks
-- The task list: a page of tasks after %(after)s by id (or the one task %(id)s), filtered by source, labels (a jsonb object the
-- task's labels contain) and its last run's status (status_rows'). Each with status_rows' columns, its last
-- run's HTTP status and lateness, its failing streak (failed or lost runs since its newest success, counted
-- to 100) and its schedule's runs of the last day by status: index descents per task, as status_rows; the
-- counts an index-only count of each status's range of runs_day_idx (task_id, status, scheduled_for), no heap
-- read, so a page costs its tasks' runs of one day whatever the history's size (docs/performance.md).
-- %(statuses)s: every run status (reconciler/runs.py).
SELECT t.id, t.source, t.spec::text AS spec_text, t.spec_hash, t.enabled, t.timezone, t.next_run_at,
       t.xmin::text AS version,
       CASE WHEN t.spec_digest IS NULL THEN NULL ELSE md5(t.spec::text) <> t.spec_digest END AS tampered,
       {{run_spec(t)}} AS run_spec_text, t.limit_wait,
       r.status AS last_status, r.scheduled_for AS last_scheduled_for, r.finished_at AS last_finished_at,
       r.http_status AS last_http_status, r.kind AS last_kind,
       EXTRACT(EPOCH FROM r.started_at - r.scheduled_for)::float8 AS last_late_seconds,
       (SELECT count(*) FROM (
            SELECT 1 FROM scheduler.runs f
             WHERE f.task_id = ANY(ARRAY[t.id]) AND f.status IN ('failed', 'lost', 'timed_out') AND f.id > COALESCE(s.id, 0)
             ORDER BY f.task_id DESC, f.id DESC LIMIT 100) streak) AS failing_streak,
       (SELECT COALESCE(jsonb_object_agg(st.status, day.n) FILTER (WHERE day.n > 0), '{}'::jsonb)
          FROM unnest(%(statuses)s::text[]) AS st(status)
         CROSS JOIN LATERAL (
               SELECT count(*) AS n FROM scheduler.runs d
                WHERE d.task_id = t.id AND d.status = st.status AND d.kind NOT IN ('manual', 'backfill')
                  AND d.scheduled_for > COALESCE(%(now)s::timestamptz, now()) - interval '1 day') day) AS last_day
  FROM scheduler.tasks t
  LEFT JOIN LATERAL ({{last_scheduled_run(t)}}) r ON true
  LEFT JOIN LATERAL (
        SELECT id FROM scheduler.runs
         WHERE task_id = ANY(ARRAY[t.id]) AND status = 'succeeded'
         ORDER BY task_id DESC, id DESC LIMIT 1) s ON true
 WHERE (%(after)s::text IS NULL OR t.id > %(after)s) AND (%(id)s::text IS NULL OR t.id = %(id)s)
   AND (%(source)s::text IS NULL OR t.source = %(source)s)
   AND (%(labels)s::jsonb IS NULL OR t.spec -> 'labels' @> %(labels)s::jsonb)
   AND (%(status)s::text IS NULL OR r.status = %(status)s OR (%(status)s = 'none' AND r.status IS NULL))
 ORDER BY t.id
 LIMIT %(limit)s;

-- name: dashboard_counts
-- The task list's heading: tasks in the database, enabled ones, and the sources (for the filter).
SELECT count(*) AS tasks, count(*) FILTER (WHERE enabled) AS enabled,
       COALESCE(array_agg(DISTINCT source), '{}') AS sources
  FROM scheduler.tasks;

-- name: dashboard_timeline_tasks
-- The timeline: a page of enabled tasks after %(after)s by id (their schedules are expanded in Python).
SELECT id, source, {{run_spec(t)}} AS spec_text, timezone FROM scheduler.tasks t
 WHERE enabled AND (%(after)s::text IS NULL OR id > %(after)s)
   AND (%(source)s::text IS NULL OR source = %(source)s)
 ORDER BY id
 LIMIT %(limit)s;

-- name: dashboard_runs
-- /runs: runs before id %(before)s, newest first, filtered by task, status, kind and scheduled time.
-- As runs_list: every task's through runs_pkey, one task's through its (task_id, id) index.
SELECT * FROM (
    (SELECT id, task_id, scheduled_for, kind, status, attempt,
            {{job_columns()}},
            engine_id, claimed_at, started_at, finished_at, http_status, error, duration_ms, response_excerpt, backfill_id,
            {{trace_hex()}} AS trace_id
       FROM scheduler.runs
      WHERE %(task_id)s::text IS NULL AND (%(before)s::bigint IS NULL OR id < %(before)s)
        AND (%(status)s::text IS NULL OR status = %(status)s) AND (%(kind)s::text IS NULL OR kind = %(kind)s)
        AND (%(since)s::timestamptz IS NULL OR scheduled_for >= %(since)s)
        AND (%(until)s::timestamptz IS NULL OR scheduled_for < %(until)s)
      ORDER BY id DESC LIMIT %(limit)s)
    UNION ALL
    (SELECT id, task_id, scheduled_for, kind, status, attempt,
            {{job_columns()}},
            engine_id, claimed_at, started_at, finished_at, http_status, error, duration_ms, response_excerpt, backfill_id,
            {{trace_hex()}} AS trace_id
       FROM scheduler.runs
      WHERE task_id = ANY(ARRAY[%(task_id)s::text]) AND (%(before)s::bigint IS NULL OR id < %(before)s)
        AND (%(status)s::text IS NULL OR status = %(status)s) AND (%(kind)s::text IS NULL OR kind = %(kind)s)
        AND (%(since)s::timestamptz IS NULL OR scheduled_for >= %(since)s)
        AND (%(until)s::timestamptz IS NULL OR scheduled_for < %(until)s)
      ORDER BY task_id DESC, id DESC LIMIT %(limit)s)) AS listed
 ORDER BY id DESC;


-- ============================================================== jobs (docs/jobs.md)
-- A callback task's run is a job: its target answers at once and reports the outcome later, to any engine.

-- name: job_attempt
-- Before a job's request leaves: the attempt's token (its sha256 only), its deadline (from now, by the database's
-- clock) and heartbeat timeout; what a previous attempt reported is cleared. Only while the run is this
-- engine's to fire (running).
UPDATE scheduler.runs
   SET attempt = %(attempt)s, callback_hash = %(hash)s,
       deadline_at = COALESCE(%(now)s::timestamptz, now()) + make_interval(secs => %(deadline)s),
       heartbeat_seconds = %(heartbeat)s, accepted_at = NULL, heartbeat_at = NULL, progress = NULL, output = NULL,
       retry_at = NULL
 WHERE id = %(run_id)s AND status = 'running'
RETURNING id;

-- name: job_accepted
-- The target accepted the job (a 2xx): the run stays running, and its lease becomes the job's, held to its
-- deadline or its heartbeat timeout (from the last heartbeat, or now), whichever is sooner. Nothing when the
-- job already completed (a fast job reports before its 202 is read).
WITH r AS (
    UPDATE scheduler.runs
       SET accepted_at = COALESCE(%(now)s::timestamptz, now()), http_status = %(http_status)s,
           response_excerpt = %(excerpt)s, started_at = COALESCE(started_at, %(started_at)s), error = NULL,
           duration_ms = %(duration_ms)s
     WHERE id = %(run_id)s AND status = 'running' AND callback_hash = %(hash)s
    RETURNING id, deadline_at, heartbeat_seconds, COALESCE(heartbeat_at, COALESCE(%(now)s::timestamptz, now())) AS beat
)
UPDATE scheduler.run_leases l
   SET job = true,
       expires_at = CASE WHEN r.heartbeat_seconds IS NULL THEN r.deadline_at
                         ELSE LEAST(r.deadline_at, r.beat + make_interval(secs => r.heartbeat_seconds)) END
  FROM r WHERE l.run_id = r.id
RETURNING l.run_id;

-- name: job_get
-- A callback's run, by id: its token's hash and state, its task's policy and subscriptions, the database's now.
-- `locked`: FOR UPDATE (the callback that writes); the token is checked first without the lock.
SELECT r.id, r.task_id, r.scheduled_for, r.kind, r.status, r.attempt, r.callback_hash, r.deadline_at,
       r.heartbeat_seconds, r.accepted_at, r.started_at, r.claimed_at, r.output, r.error, r.retry_at,
       r.trace_id, r.traceparent, t.spec -> 'policy' AS policy, t.spec -> 'notify' AS notify, t.spec -> 'target' AS target,
       COALESCE(%(now)s::timestamptz, now()) AS now
  FROM scheduler.runs r LEFT JOIN scheduler.tasks t ON t.id = r.task_id
 WHERE r.id = %(run_id)s;

-- name: job_lock
SELECT status, callback_hash FROM scheduler.runs WHERE id = %(run_id)s FOR UPDATE;

-- name: job_heartbeat
-- A heartbeat: its time and progress (the last given stays when it sends none), and the job's lease moved to its
-- heartbeat timeout from now (never past its deadline).
WITH r AS (
    UPDATE scheduler.runs
       SET heartbeat_at = COALESCE(%(now)s::timestamptz, now()), progress = COALESCE(%(progress)s::jsonb, progress)
     WHERE id = %(run_id)s
    RETURNING id, deadline_at, heartbeat_seconds
)
UPDATE scheduler.run_leases l
   SET expires_at = LEAST(r.deadline_at, COALESCE(%(now)s::timestamptz, now()) + make_interval(secs => r.heartbeat_seconds))
  FROM r WHERE l.run_id = r.id AND l.job AND r.heartbeat_seconds IS NOT NULL;

-- name: job_end
-- A job's final status (succeeded, failed, timed_out), with its output and error; a timed-out attempt's deadline
-- is now (its token answers 410 from then on). Its lease is released by leases_release_many beside it.
UPDATE scheduler.runs
   SET status = %(status)s, finished_at = COALESCE(%(now)s::timestamptz, now()), error = %(error)s,
       output = %(output)s::jsonb, retry_at = NULL,
       deadline_at = CASE WHEN %(status)s = 'timed_out' THEN LEAST(deadline_at, COALESCE(%(now)s::timestamptz, now()))
                          ELSE deadline_at END,
       duration_ms = LEAST(2147483647, 1000 * extract(epoch FROM COALESCE(%(now)s::timestamptz, now())
                                                            - COALESCE(started_at, claimed_at)))::int
 WHERE id = %(run_id)s;

-- name: job_retry
-- A job that failed or timed out with retries left: queued again (the same row: the same Idempotency-Key) for
-- `wait` seconds from now; a claim starts its next attempt then, with a new token. Until then it holds no slot.
UPDATE scheduler.runs
   SET status = 'queued', retry_at = COALESCE(%(now)s::timestamptz, now()) + make_interval(secs => %(wait)s),
       error = %(error)s, output = %(output)s::jsonb, accepted_at = NULL,
       deadline_at = CASE WHEN %(timed_out)s THEN LEAST(deadline_at, COALESCE(%(now)s::timestamptz, now()))
                          ELSE deadline_at END
 WHERE id = %(run_id)s;

-- name: jobs_overdue
-- Jobs past their deadline or heartbeat timeout (their lease expired, by the database's clock): any engine's
-- upkeep ends them (run_leases_job_idx; SKIP LOCKED: engines scanning at once split them).
SELECT r.id, r.task_id, r.scheduled_for, r.kind, r.status, r.attempt, r.deadline_at, r.heartbeat_seconds,
       r.accepted_at, r.heartbeat_at, r.started_at, r.trace_id, r.traceparent,
       t.spec -> 'policy' AS policy, t.spec -> 'notify' AS notify,
       COALESCE(%(now)s::timestamptz, now()) AS now
  FROM scheduler.run_leases l
  JOIN scheduler.runs r ON r.id = l.run_id
  LEFT JOIN scheduler.tasks t ON t.id = r.task_id
 WHERE l.job AND l.expires_at <= COALESCE(%(now)s::timestamptz, now()) AND r.status = 'running'
 ORDER BY l.expires_at
 FOR UPDATE OF r SKIP LOCKED
 LIMIT %(limit)s;

-- name: jobs_health
-- The metrics' jobs of the engine's sources whose targets accepted them (their leases are the jobs'): how many,
-- the oldest one's age and the longest any has gone without a heartbeat (since it was accepted when it sent none).
SELECT count(*) AS running,
       COALESCE(max(extract(epoch FROM COALESCE(%(now)s::timestamptz, now()) - r.accepted_at)), 0)::float8
           AS oldest_seconds,
       COALESCE(max(extract(epoch FROM COALESCE(%(now)s::timestamptz, now())
                                       - COALESCE(r.heartbeat_at, r.accepted_at))), 0)::float8
           AS stalest_heartbeat_seconds
  FROM scheduler.run_leases l
  JOIN scheduler.runs r ON r.id = l.run_id
  JOIN scheduler.tasks t ON t.id = r.task_id
 WHERE l.job AND {{of_sources(t.source)}};
