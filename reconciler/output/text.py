"""Renderings for people and machines: `next` listings, instants, tables, status and run lines.

Text output writes every instant one way, `2026-12-03 09:55:00 UTC` (utc_text), next to the
task's local time where that differs (when_text); json keeps ISO 8601 with an offset (iso).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TextIO
from zoneinfo import ZoneInfo

from reconciler.clock import utc_iso, utc_text, when_text
from reconciler.files.tasks import Task
from reconciler.output.jobs import job_lines
from reconciler.reconcile.revision import short
from reconciler.schedule.base import Fire
from reconciler.schedule.describe import describe_trigger, fire_line
from reconciler.schedule.excluded import Excluded
from reconciler.spec.task import TaskSpec

# A due task is claimed within a second or two while an engine runs; this much later means none is claiming it.
OVERDUE_SECONDS = 60


# ---------------------------------------------------------------- instants


class NextRow(NamedTuple):
    """One task of `reconciler next`: its next occurrences, and what its calendars take away in that span."""

    task: Task
    fires: list[Fire]
    excluded: list[Excluded]
    unlisted: int = 0  # excluded in the span but not listed
    counted: bool = True  # False: the span holds more than listed, not counted


def next_text(rows: list[NextRow]) -> str:
    out: list[str] = []
    for task, fires, excluded, unlisted, counted in rows:
        zone = ZoneInfo(task.spec.timezone)
        state = "" if task.spec.enabled else "  (disabled)"
        out.append(f"{task.id}  — {describe_trigger(task.spec)}{state}")
        if not fires:
            out.append("  no further occurrences" + (": its calendars take away every one" if excluded else ""))
        # In time order, so an excluded occurrence stands where it would have fired.
        lines = [(fire.at, fire_line(fire, zone)) for fire in fires]
        lines += zip((e.at for e in excluded), excluded_lines(excluded, zone), strict=True)
        out.extend(f"  {line}" for _, line in sorted(lines, key=lambda pair: pair[0]))
        if not counted:
            out.append("  … and more excluded occurrences after these (not counted)")
        elif unlisted:
            out.append(f"  … and {unlisted:,} more excluded occurrence(s) in this span, not listed")
    return "\n".join(out)


def excluded_lines(excluded: list[Excluded], zone: ZoneInfo) -> list[str]:
    """`excluded: 2025-09-01 09:00:00 EDT (2025-09-01 13:00:00 UTC)  holiday: Labor Day (us)`, one per occurrence."""
    return [safe(f"excluded: {when_text(item.at, zone)}  {item.reason}") for item in excluded]


def next_item(
    task_id: str, spec: TaskSpec, fires: list[Fire], excluded: list[Excluded] | None = None
) -> dict[str, Any]:
    """One task of `next --format json`: its fire times in its zone, the DST notes, and (a task that names
    calendars) the occurrences its calendars take away in the span shown, with the reasons."""
    zone = ZoneInfo(spec.timezone)
    item: dict[str, Any] = {
        "id": task_id,
        "fire_times": [f.at.astimezone(zone).isoformat() for f in fires],
        "dst": [f"{utc_iso(f.at)}: {f.note}" for f in fires if f.note],
    }
    if spec.calendars is not None:
        item["calendar"] = [f"{utc_iso(f.at)}: {f.rule}" for f in fires if f.rule]
        item["excluded"] = [{"at": e.at.astimezone(zone).isoformat(), "reason": e.reason} for e in excluded or []]
    return item


def next_json(rows: list[NextRow]) -> str:
    return json.dumps([next_item(row.task.id, row.task.spec, row.fires, row.excluded) for row in rows], indent=2)


def json_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Database rows for `--format json`: datetimes as ISO text (UTC)."""
    return [{k: utc_iso(v) if isinstance(v, datetime) else v for k, v in row.items()} for row in rows]


# ---------------------------------------------------------------- safe text

# C0 and C1 controls, DEL, and the bidi overrides that reorder what a terminal or browser shows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe(text: str) -> str:
    """`text` with every control character as a visible escape (\\x1b, \\n): no raw ESC reaches a terminal."""
    return _UNSAFE.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def history_line(row: Mapping[str, Any]) -> str:
    """One apply for `reconciler history`."""
    counts = row["counts"] if isinstance(row["counts"], dict) else {}
    done = (
        ", ".join(f"{counts[k]} {k}d" if k != "drift" else f"{counts[k]} drifted" for k in counts if counts[k])
        or "no changes"
    )
    rev = row["revision"] or "(no revision)"
    who = f" by {row['author']}" if row["author"] else ""
    ref = f" [{row['reference']}]" if row["reference"] else ""
    msg = f": {row['message']}" if row["message"] else ""
    op = f" ({row['op']})" if row.get("op") else ""
    return safe(f"#{row['id']} {utc_text(row['applied_at'])} {row['source']} {rev}{who}{ref}{msg} — {done}{op}")


def pause_line(pause: Mapping[str, Any]) -> str:
    """A pause in force, on a line of its own (plan, status): `‖ paused ID by ACTOR since T, until U: REASON`."""
    until = f"until {utc_text(pause['paused_until'])}" if pause["paused_until"] else "until resumed"
    when = f"since {utc_text(pause['paused_at'])}, {until}"
    return safe(f"‖ paused {pause['task_id']} by {pause['paused_by']} {when}: {pause['reason']}")


AUDIT_IDS_SHOWN = 5  # task ids an audit line names before "and N more"


def audit_line(row: Mapping[str, Any]) -> str:
    """One operator action for `reconciler audit`: `#7 2026-12-03 09:55:00 UTC alice pause a, b: why (until …)`."""
    ids: list[str] = list(row["task_ids"] or [])
    named = ", ".join(ids[:AUDIT_IDS_SHOWN]) + (
        f" and {len(ids) - AUDIT_IDS_SHOWN} more" if len(ids) > AUDIT_IDS_SHOWN else ""
    )
    details = row["details"] if isinstance(row["details"], dict) else {}
    facts = [f"{k.replace('_', ' ')} {v}" for k, v in details.items() if k in ("run_id", "until") and v]
    if isinstance(details.get("revision"), str):
        facts.append(f"revision {short(details['revision'])}")
    if isinstance(details.get("counts"), dict):
        facts += [f"{v} {k}" for k, v in details["counts"].items() if v]
    if details.get("selected"):
        facts.append(f"every task of {details['selected']}")
    facts += backfill_facts(details)
    source = f" [{row['source']}]" if row["source"] else ""
    text = f"#{row['id']} {utc_text(row['at'])} {row['actor']} {row['action']}{source} {named or '-'}"
    text += f": {row['reason']}" if row["reason"] else ""
    return safe(text + (f" ({', '.join(facts)})" if facts else ""))


def _instant(value: object) -> str:
    """An ISO instant of an audit row's details as text output writes instants (as stored when it is not one)."""
    try:
        return utc_text(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def backfill_facts(details: Mapping[str, Any]) -> list[str]:
    """A backfill's audit facts: `backfill 3`, then what it queued (`288 run(s) queued over [from, to), --reprocess
    none`) or what its cancel dropped (`239 queued run(s) dropped`)."""
    if details.get("backfill_id") is None:
        return []
    facts = [f"backfill {details['backfill_id']}"]
    if "queued" in details:
        span = f" over [{_instant(details.get('from'))}, {_instant(details.get('to'))})" if "from" in details else ""
        how = f", --reprocess {details['reprocess']}" if details.get("reprocess") else ""
        facts.append(f"{details['queued']} run(s) queued{span}{how}")
    if "dropped" in details:
        facts.append(f"{details['dropped']} queued run(s) dropped")
    return facts


# ---------------------------------------------------------------- terminals and tables


def colour_wanted(stream: TextIO, no_color: bool = False) -> bool:
    """ANSI colours only on a terminal, never with `--no-color` or a non-empty NO_COLOR (no-color.org)."""
    return not no_color and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb" and stream.isatty()


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> list[str]:
    """Aligned columns, each as wide as its widest cell (cells escaped by `safe`); `right`: right-aligned columns."""
    cells = [[safe(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    ]


# ---------------------------------------------------------------- status


def grace_seconds(spec: dict[str, Any]) -> int:
    """A stored spec's policy.misfire_grace_seconds (the default, 60, when absent or edited into nonsense)."""
    policy = spec.get("policy")
    value = policy.get("misfire_grace_seconds") if isinstance(policy, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 60


def is_overdue(enabled: bool, next_run_at: datetime | None, grace: int, now: datetime) -> bool:
    """Due longer ago than OVERDUE_SECONDS (or the task's misfire grace, when longer) and still not claimed:
    no engine is claiming it, and one that claims it now records the occurrence missed."""
    if not enabled or next_run_at is None:
        return False
    return (now - next_run_at).total_seconds() > max(OVERDUE_SECONDS, grace)


def status_text(tasks: list[dict[str, Any]], engines: list[dict[str, Any]], revisions: list[dict[str, Any]]) -> str:
    """`reconciler status` for a terminal: live revisions, one row per task, live engines."""
    lines = []
    for r in revisions:
        by = f" by {r['author']}" if r["author"] else ""
        applied = utc_text(r["applied_at"])
        lines.append(safe(f"source {r['source']}: live revision {r['revision'] or '(none)'} (applied {applied}{by})"))
    header = ["TASK", "NEXT RUN (UTC)", "NEXT RUN (local)", "LAST RUN (UTC)", "LAST STATUS", "FLAGS"]
    rows = [
        [
            t["id"],
            utc_text(t["next_run_at"]) if t["enabled"] else "disabled",
            t["next_run_local"],
            utc_text(t["last_run_at"]),
            t["last_status"] or "-",
            " ".join(flag for flag, on in status_flags(t) if on),
        ]
        for t in tasks
    ]
    lines += table(header, rows) if tasks else ["no tasks in the database"]
    lines += [pause_line({"task_id": t["id"], **t["paused"]}) for t in tasks if t["paused"]]
    lines += [waiting_line(t) for t in tasks if t.get("waiting_for")]
    lines.append(f"{len(engines)} live engine(s)")
    lines += [
        safe(
            f"  {e['engine_id']} ({e['host']} pid {e['pid']}, last seen {utc_text(e['last_seen'])}"
            f"{database_text(e.get('database'), e.get('server'), e.get('primary'))})"
        )
        for e in engines
    ]
    return "\n".join(lines)


def status_flags(task: Mapping[str, Any]) -> tuple[tuple[str, bool], ...]:
    """`status`'s FLAGS of a task, each with whether it is on."""
    waiting, paused = bool(task.get("waiting_for")), bool(task["paused"])
    return (("OVERDUE", task["overdue"]), ("PAUSED", paused), ("WAITING", waiting), ("DRIFT", task["drift"]))


def waiting_line(task: Mapping[str, Any]) -> str:
    """A task whose due occurrence waits for a limit (limits.d), on a line of its own, as the dashboard marks it:
    `⧗ ID waiting for limit NAME (due since T)`: an engine starts it when the limit has room."""
    due = f" (due since {utc_text(task['next_run_at'])})" if task.get("next_run_at") else ""
    return safe(f"⧗ {task['id']} waiting for limit {task['waiting_for']}{due}")


def database_text(database: str | None, server: str | None, primary: bool | None) -> str:
    """`, database H:P (primary)` for an engine's line in `status`; `, database H:P -> server S:Q (…)` when
    the engine reached the server through another address (a pooler); nothing from an older engine."""
    if not database:
        return ""
    through = f" -> server {server}" if server and server != database else ""
    role = "" if primary is None else " (primary)" if primary else " (standby)"
    return f", database {database}{through}{role}"


# ---------------------------------------------------------------- runs


def runs_text(
    rows: Sequence[Mapping[str, Any]],
    verbose: bool = False,
    under: Callable[[Mapping[str, Any]], list[str]] | None = None,
) -> str:
    """`reconciler runs` for a terminal (values already masked): one aligned row per run; `verbose` adds
    the engine, the times and the stored response excerpt under each; `under`, more lines under each
    (the notifications it caused)."""
    header = ["RUN", "TASK", "SCHEDULED FOR (UTC)", "KIND", "STATUS", "TRY", "HTTP", "ERROR"]
    cells = [
        [
            str(r["id"]),
            r["task_id"],
            utc_text(r["scheduled_for"]),
            f"backfill #{r['backfill_id']}" if r.get("backfill_id") else r["kind"],
            r["status"],
            str(r["attempt"]),
            str(r["http_status"] or "-"),
            r["error"] or "",
        ]
        for r in rows
    ]
    head, *body = table(header, cells, right=(0, 5, 6))
    out = [head]
    for r, line in zip(rows, body, strict=True):
        out.append(line)
        out += [safe(f"    {detail}") for detail in job_lines(r)]
        if verbose:
            out += [safe(f"    {detail}") for detail in _run_details(r)]
        if under is not None:
            out += [safe(f"    {extra}") for extra in under(r)]
    return "\n".join(out)


def _run_details(run: Mapping[str, Any]) -> list[str]:
    facts = [f"engine {run['engine_id']}"] if run.get("engine_id") else []
    facts += [
        f"{name} {utc_text(run[name + '_at'])}" for name in ("claimed", "started", "finished") if run.get(name + "_at")
    ]
    if run.get("duration_ms") is not None:
        facts.append(f"{run['duration_ms']} ms")
    lines = [", ".join(facts)] if facts else []
    excerpt = run.get("response_excerpt")
    lines.append(f"response: {excerpt}" if excerpt else "response: (none stored)")
    return lines
