-- Every SQL statement reconciler runs, by name. Loaded once by reconciler/store.py.
-- Placeholders are psycopg's %(name)s. The schema is "scheduler" (see schemata.toml).

-- name: catalog_columns
SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = %(schema)s;

-- name: catalog_indexes
SELECT indexname FROM pg_indexes WHERE schemaname = %(schema)s;

-- name: catalog_schema
SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s;

-- name: lock_key
-- A transaction-scoped advisory lock: applies (and schema upgrades) serialize on it.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: tasks_all
-- xmin changes with every write to a row, ours or anyone's: it is the row's version for saved plans.
-- spec comes as text and is parsed only for rows that changed; tampered compares the digest apply wrote.
SELECT id, source, spec::text AS spec_text, spec_hash, enabled, timezone, next_run_at, xmin::text AS version,
       CASE WHEN spec_digest IS NULL THEN NULL ELSE md5(spec::text) <> spec_digest END AS tampered
  FROM scheduler.tasks ORDER BY id;

-- name: task_insert
INSERT INTO scheduler.tasks (id, source, spec, spec_hash, spec_digest, enabled, timezone, next_run_at,
                             created_at, updated_at)
VALUES (%(id)s, %(source)s, %(spec)s, %(spec_hash)s, md5((%(spec)s)::jsonb::text), %(enabled)s, %(timezone)s,
        %(next_run_at)s, %(now)s, %(now)s);

-- name: task_update
UPDATE scheduler.tasks
   SET id = %(id)s, spec = %(spec)s, spec_hash = %(spec_hash)s, spec_digest = md5((%(spec)s)::jsonb::text),
       enabled = %(enabled)s, timezone = %(timezone)s,
       next_run_at = %(next_run_at)s, updated_at = %(now)s
 WHERE id = %(old_id)s;

-- name: runs_move
UPDATE scheduler.runs SET task_id = %(id)s WHERE task_id = %(old_id)s;

-- name: leases_move
UPDATE scheduler.run_leases SET task_id = %(id)s WHERE task_id = %(old_id)s;

-- name: task_delete
DELETE FROM scheduler.tasks WHERE id = %(id)s;

-- name: notify_tasks
SELECT pg_notify('scheduler_tasks', %(payload)s);

-- name: status_rows
SELECT t.id, t.source, t.spec::text AS spec_text, t.spec_hash, t.enabled, t.timezone, t.next_run_at,
       t.xmin::text AS version,
       CASE WHEN t.spec_digest IS NULL THEN NULL ELSE md5(t.spec::text) <> t.spec_digest END AS tampered,
       r.status AS last_status, r.scheduled_for AS last_scheduled_for, r.finished_at AS last_finished_at
  FROM scheduler.tasks t
  LEFT JOIN LATERAL (
        SELECT status, scheduled_for, finished_at FROM scheduler.runs
         WHERE task_id = t.id ORDER BY id DESC LIMIT 1) r ON true
 ORDER BY t.id;

-- name: engines_live
SELECT engine_id, host, pid, started_at, last_seen FROM scheduler.engines
 WHERE last_seen >= %(since)s ORDER BY engine_id;
