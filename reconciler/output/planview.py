"""A plan for people and machines: terminal text, a pull-request comment (markdown) and json.

Every value taken from a file or the database is masked (masking.py) and escaped for its
medium: control characters become visible escapes, and markdown puts file content only
inside fences longer than any backtick run in it. The markdown always fits one GitHub
comment: past a budget, the remaining changes are listed by id only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from reconciler.clock import utc_iso, utc_text, when_text
from reconciler.output.masking import mask_path, mask_spec, mask_url
from reconciler.reconcile.diff import FieldDiff
from reconciler.reconcile.plan import FORMAT_VERSION, Change, Plan
from reconciler.spec.task import Policy

if TYPE_CHECKING:
    from reconciler.reconcile.calendars import CalendarChange
    from reconciler.reconcile.limits import LimitChange
    from reconciler.reconcile.notifiers import NotifierChange
from reconciler.output.text import excluded_lines, pause_line, safe

SYMBOLS = {"create": "+", "update": "~", "delete": "-", "move": ">", "noop": " "}
COLOURS = {"create": "32", "update": "33", "delete": "31", "move": "36", "drift": "35"}
# In a ```diff block GitHub colours lines that start with + (green), - (red) and ! (orange).
DIFF_MARKS = {"create": "+", "delete": "-", "update": "!", "move": "!"}
EMOJI = {"create": "🟢", "update": "🟡", "move": "🔵", "delete": "🔴", "drift": "🟣", "noop": "⚪"}
GITHUB_COMMENT_LIMIT = 65_536
MARKDOWN_BUDGET = 64_000  # characters of a comment; the rest of the limit is headroom for the workflow's lines
LISTED_MESSAGES = 20  # refusals or warnings shown in a comment
POLICY_DEFAULTS = Policy().model_dump(mode="json")


# ---------------------------------------------------------------- what a change does


def _value(path: str, value: object) -> str:
    return "(absent)" if value is None else json.dumps(mask_path(path, value), ensure_ascii=False)


def target_summary(spec: dict[str, Any]) -> str:
    """`POST https://host/path (auth bearer; headers A, B; body json 120 B; timeout 10 s)`."""
    found = spec.get("target")
    target: dict[str, Any] = found if isinstance(found, dict) else {}
    parts: list[str] = []
    auth = target.get("auth")
    if isinstance(auth, dict):
        parts.append(f"auth {auth.get('kind', '?')}")
    headers = target.get("headers")
    if isinstance(headers, dict) and headers:
        parts.append("headers " + ", ".join(sorted(map(str, headers))))
    query = target.get("query")
    if isinstance(query, dict) and query:
        parts.append("query " + ", ".join(sorted(map(str, query))))
    if target.get("json") is not None:
        parts.append(f"body json {len(json.dumps(target['json'], separators=(',', ':')).encode())} B")
    elif isinstance(target.get("body"), str):
        parts.append(f"body text {len(target['body'].encode())} B")
    timeout = target.get("timeout_seconds")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        parts.append(f"timeout {timeout:g} s")
    elif timeout is not None:
        parts.append(f"timeout {json.dumps(timeout)}")
    url = mask_url(str(target.get("url", "?")))
    return f"{target.get('method', 'POST')} {url}" + (f" ({'; '.join(parts)})" if parts else "")


def policy_summary(spec: dict[str, Any]) -> str | None:
    """The policy values that differ from the defaults, or None."""
    policy = spec.get("policy")
    if not isinstance(policy, dict):
        return None
    changed = [f"{k} = {json.dumps(v)}" for k, v in sorted(policy.items()) if POLICY_DEFAULTS.get(k) != v]
    return ", ".join(changed) or None


def _spec_lines(spec: dict[str, Any]) -> list[str]:
    lines = [f"target: {target_summary(spec)}"]
    policy = policy_summary(spec)
    if policy:
        lines.append(f"policy: {policy}")
    if spec.get("enabled") is False:
        lines.append("enabled: false")
    return lines


def notifier_summary(spec: dict[str, Any]) -> str:
    """`webhook POST https://host/path (…)` or `slack (URL from $NAME; timeout 10 s)`."""
    if spec.get("kind") == "slack":
        url = spec.get("url")
        name = url.get("env", "?") if isinstance(url, dict) else "?"
        return f"slack (URL from ${name}; timeout {spec.get('timeout_seconds', '?')} s)"
    return "webhook " + target_summary({"target": spec})


def named_lines(
    what: str, change: NotifierChange | LimitChange, marks: dict[str, str], summary: Callable[[dict[str, Any]], str]
) -> list[str]:
    """One change of a `what` (notifier, limit): its head, then `path: live → desired` (or its summary, created
    or deleted)."""
    mark = marks[change.op]
    lines = [f"{mark} {what} {change.name}"]
    lines += [f"{mark}     {f.path}: {_value(f.path, f.old)} → {_value(f.path, f.new)}" for f in change.fields]
    spec = change.after if change.op == "create" else change.before if change.op == "delete" else None
    if spec is not None:
        lines.append(f"{mark}     {summary(spec)}")
    return [safe(line) for line in lines]


def _notifier_blocks(plan: Plan, marks: dict[str, str]) -> list[str]:
    return [line for change in plan.notifiers for line in named_lines("notifier", change, marks, notifier_summary)]


def limit_summary(spec: dict[str, Any]) -> str:
    """`at most 4 in flight; 10 a second, bursts of 10`."""
    parts = []
    if isinstance(spec.get("max_in_flight"), int):
        parts.append(f"at most {spec['max_in_flight']:,} in flight")
    rate = spec.get("rate_per_second")
    if isinstance(rate, int | float):
        burst = spec.get("burst") or max(1, math.ceil(rate))
        parts.append(f"{rate:g} a second, bursts of {burst:,}")
    return "; ".join(parts) or "no numbers"


def _limit_blocks(plan: Plan, marks: dict[str, str]) -> list[str]:
    return [line for change in plan.limits for line in named_lines("limit", change, marks, limit_summary)]


def calendar_summary(spec: dict[str, Any]) -> str:
    """`business days: weekend sat, sun; 138 holidays of US-NY 2025–2036; 1 extra holiday` or `blackout: 2
    window(s) in Europe/Berlin`."""
    if spec.get("kind") == "blackout":
        return f"blackout: {len(spec.get('window', []))} window(s) in {spec.get('timezone', 'UTC')}"
    parts = [f"weekend {', '.join(spec.get('weekend', [])) or 'none'}"]
    source, resolved = spec.get("holidays"), spec.get("resolved", {})
    if isinstance(source, dict):
        region = "-".join(str(source[key]) for key in ("country", "subdivision") if key in source)
        first, last = resolved.get("years", ["?", "?"])
        observed = "" if source.get("observed", True) else ", not observed"
        parts.append(f"{len(resolved.get('holidays', {}))} holidays of {region} {first}–{last}{observed}")
    parts += [
        f"{len(spec[key])} {key.replace('_', ' ')}" for key in ("extra_holidays", "extra_workdays") if spec.get(key)
    ]
    return "business days: " + "; ".join(parts)


HOLIDAY_PATH = "resolved.holidays."


def calendar_lines(change: CalendarChange, marks: dict[str, str]) -> list[str]:
    """One calendar change: its head, then each changed key (holiday dates as `+ holiday DATE NAME` or
    `- holiday …`), or what it is (created or deleted)."""
    mark = marks[change.op]
    lines = [f"{mark} calendar {change.name}"]
    for f in change.fields:
        if f.path.startswith(HOLIDAY_PATH):
            day = f.path.removeprefix(HOLIDAY_PATH)
            if f.old is None:
                lines.append(f"{mark}     + holiday {day} {f.new}")
            elif f.new is None:
                lines.append(f"{mark}     - holiday {day} {f.old}")
            else:
                lines.append(f"{mark}     ~ holiday {day}: {f.old} → {f.new}")
        else:
            lines.append(f"{mark}     {f.path}: {_value(f.path, f.old)} → {_value(f.path, f.new)}")
    spec = change.after if change.op != "delete" else change.before
    if spec is not None and change.op != "update":
        lines.append(f"{mark}     {calendar_summary(spec)}")
    return [safe(line) for line in lines]


def _calendar_blocks(plan: Plan, marks: dict[str, str]) -> list[str]:
    return [line for change in plan.calendars for line in calendar_lines(change, marks)]


def _details(change: Change, zone: ZoneInfo) -> list[str]:
    """Lines about a change other than its field diffs: what it calls, when it fires, warnings."""
    lines: list[str] = []
    if change.op == "create" and change.task is not None:
        lines += _spec_lines(change.task.normalized)
    if change.op == "delete" and change.row is not None:
        lines += _spec_lines(change.row.spec)
    if change.description:
        lines.append(f"schedule: {change.description}")
    for moment in change.next_fire_times:
        lines.append(f"next: {when_text(moment, zone)}")
    lines += excluded_lines(change.preview.excluded, zone)
    lines += [f"warning: {w}" for w in change.warnings]
    return lines


def _drift_head(change: Change) -> str:
    verb = "removes" if change.op == "delete" else "restores"
    return f"drift {change.id}: the row was changed outside the reconciler; this apply {verb} it (live → desired)"


def _diffs(change: Change) -> list[FieldDiff]:
    return [*change.drift_fields, *change.fields]


def _head(change: Change) -> str:
    if change.op == "move":
        return f"move {change.moved_from} → {change.id}"
    return f"{change.op} {change.id}"


def _zone(change: Change) -> ZoneInfo:
    return ZoneInfo(change.task.timezone if change.task is not None else "UTC")


def _kind(change: Change) -> str:
    """How a change is marked: "drift" for an update that only restores a drifted row, else its op."""
    return "drift" if change.drift and change.op == "update" and not change.fields else change.op


def shown(plan: Plan) -> list[Change]:
    """The changes a plan shows: every write, and drift."""
    return [c for c in plan.changes if c.writes or c.drift]


def summary_line(plan: Plan) -> str:
    s = plan.summary
    text = (
        f"Plan: {s['create']} to create, {s['update']} to update, {s['move']} to move, "
        f"{s['delete']} to delete, {s['noop']} unchanged"
    )
    text += f", {s['drift']} drifted" if s["drift"] else ""
    text += f", {len(plan.paused)} paused" if plan.paused else ""  # a runtime state, not a change
    # Each kind only when it changes: the line of a plan without notifier changes is what it always was.
    kinds: list[tuple[str, list[Any]]] = [("notifiers", plan.notifiers), ("calendars", plan.calendars)]
    for what, changes in [*kinds, ("limits", plan.limits)]:
        if changes:
            ops = [change.op for change in changes]
            text += f"; {what}: " + ", ".join(f"{ops.count(op)} to {op}" for op in ("create", "update", "delete"))
    return text + "."


def _footer(plan: Plan) -> list[str]:
    out = []
    if plan.live is not None:
        out.append(f"live revision {plan.live.revision or '(none)'} (applied {utc_text(plan.live.applied_at)})")
    out.append(f"plan digest {plan.digest}")
    return out


# ---------------------------------------------------------------- text


def change_text(change: Change) -> list[str]:
    """One change for a terminal: terraform-like symbols, `path: live → desired`."""
    lines = [f"{SYMBOLS[change.op]} {_head(change)}"]
    if change.drift:
        lines.append(f"! {_drift_head(change)}")
    lines += [f"    {f.path}: {_value(f.path, f.old)} → {_value(f.path, f.new)}" for f in _diffs(change)]
    lines += [f"    {line}" for line in _details(change, _zone(change))]
    return [safe(line) for line in lines]


def plan_text(plan: Plan, colour: bool = False) -> str:
    """Terraform-like text: one block per change, the verdict and a summary line last."""
    out: list[str] = []
    for change in shown(plan):
        block = change_text(change)
        if colour:
            code = COLOURS.get(_kind(change), "0")
            block[0] = f"\x1b[{code}m{block[0]}\x1b[0m"
        out.extend(block)
    out += _calendar_blocks(plan, SYMBOLS)
    out += _notifier_blocks(plan, SYMBOLS)
    out += _limit_blocks(plan, SYMBOLS)
    out += [f"\x1b[34m{line}\x1b[0m" if colour else line for line in map(pause_line, plan.paused)]
    if not plan.has_changes:
        out.append("No changes. The database matches the task files.")
    out += [safe(f"warning: {w}") for w in plan.warnings]
    out.append(summary_line(plan))
    out += [safe(f"refused: {r}") for r in plan.refused]
    if plan.refused:
        out.append("apply with these options would refuse this plan; nothing would be written.")
    return "\n".join(out)


# ---------------------------------------------------------------- markdown


def fence(lines: list[str], info: str = "") -> str:
    """A fenced code block that no line inside can close: longer than any backtick run in it."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return "\n".join([ticks + info, *lines, ticks])


def change_diff(change: Change) -> list[str]:
    """One change as ```diff lines: every line starts with +, - or !, so GitHub colours each kind."""
    mark = DIFF_MARKS[change.op] if change.writes else "!"
    lines = [f"{mark} {_head(change)}"]
    if change.drift:
        lines.append(f"! {_drift_head(change)}")
    for f in _diffs(change):
        lines += [f"-     {f.path}: {_value(f.path, f.old)}", f"+     {f.path}: {_value(f.path, f.new)}"]
    lines += [f"{mark}     {line}" for line in _details(change, _zone(change))]
    return [safe(line) for line in lines]


def _section(change: Change) -> str:
    summary = f"<summary>{EMOJI[_kind(change)]} {md_text(_head(change))}</summary>"
    return f"<details>{summary}\n\n{fence(change_diff(change), 'diff')}\n\n</details>"


def _summary_table(plan: Plan) -> list[str]:
    s = plan.summary
    rows = [("create", "to create"), ("update", "to update"), ("move", "to move"), ("delete", "to delete")]
    rows += [("drift", "drifted"), ("noop", "unchanged")]
    return ["| | change | tasks |", "|---|---|---:|", *(f"| {EMOJI[k]} | {label} | {s[k]} |" for k, label in rows)]


def md_text(text: str) -> str:
    """Text for markdown outside code: every character but letters, digits, space, `.`, `/` and `-`
    as an HTML entity, so nothing in it is markup, a mention or a reference."""
    return re.sub(r"[^A-Za-z0-9 ./-]", lambda m: f"&#{ord(m[0])};", safe(text))


def _ranges(names: list[str]) -> list[str]:
    """Sorted names with runs of consecutive numbers (same prefix, same width) as `prefix{0001..0420}`."""
    out: list[str] = []
    run: list[tuple[str, str]] = []  # (prefix, digits) of the current run

    def close() -> None:
        if len(run) >= 3:
            out.append(f"{run[0][0]}{{{run[0][1]}..{run[-1][1]}}}")
        else:
            out.extend(prefix + digits for prefix, digits in run)
        run.clear()

    for name in names:
        found = re.fullmatch(r"(.*?)(\d+)", name)
        if found is None:
            close()
            out.append(name)
            continue
        prefix, digits = found[1], found[2]
        last = run[-1] if run else None
        if not (last and last[0] == prefix and len(last[1]) == len(digits) and int(last[1]) + 1 == int(digits)):
            close()
        run.append((prefix, digits))
    close()
    return out


def id_listing(ids: list[str]) -> str:
    """Ids grouped by folder, numbered runs as ranges: `team/` a, b, check-{0001..0420}."""
    folders: dict[str, list[str]] = {}
    for task_id in sorted(ids):
        folder, slash, name = task_id.rpartition("/")
        folders.setdefault(folder + slash, []).append(name)
    parts = []
    for folder, names in folders.items():
        listed = ", ".join(md_text(name) for name in _ranges(names))
        parts.append(f"<code>{md_text(folder)}</code> {listed}" if folder else listed)
    return " · ".join(parts)


def _remaining(changes: list[Change], room: int) -> list[str]:
    """The ids of changes without a details block, by kind, within `room` characters."""
    by_op: dict[str, list[str]] = {}
    for change in changes:
        by_op.setdefault(change.op, []).append(change.id)
    lines = [f"{EMOJI[op]} **{op}** ({len(ids)}): {id_listing(ids)}" for op, ids in by_op.items()]
    out: list[str] = []
    left = room - 200
    for line in lines:
        if len(line) + 2 > left:  # cut between two ids (", " and " · " never occur inside an escaped id)
            cut = max(line.rfind(", ", 0, left), line.rfind(" · ", 0, left))
            out.append((line[:cut] if cut > 0 else "") + " … and more: too many ids to list here, see the job log")
            break
        out.append(line)
        left -= len(line) + 2
    return out


def _capped(messages: list[str]) -> list[str]:
    """Refusals or warnings for a comment: the first LISTED_MESSAGES, each at most 500 characters."""
    shown = [safe(m if len(m) <= 500 else m[:497] + "…") for m in messages[:LISTED_MESSAGES]]
    if len(messages) > LISTED_MESSAGES:
        shown.append(f"… and {len(messages) - LISTED_MESSAGES} more (all of them in the job log)")
    return shown


def plan_markdown(plan: Plan, budget: int = MARKDOWN_BUDGET) -> str:
    """A pull-request comment: verdict, summary table, then one <details> block per change while
    they fit the budget, then the ids of the rest ("full plan in the job log")."""
    head = [f"### reconciler plan (source <code>{md_text(plan.source)}</code>)", "", f"**{summary_line(plan)}**", ""]
    if plan.refused:
        head += ["⛔ **`apply` with these options would refuse this plan; nothing would be written:**", ""]
        head += [fence(_capped(plan.refused), "text"), ""]
    if plan.warnings:
        head += ["⚠️ **Warnings:**", "", fence(_capped(plan.warnings), "text"), ""]
    head += [*_summary_table(plan), ""]
    if plan.calendars:
        retimed = sum(1 for c in plan.changes if any(f.path.startswith("calendars.") for f in c.fields))
        head += [
            f"**Calendars: {len(plan.calendars)} change(s)**, retiming {retimed} task(s)",
            "",
            fence(_capped(_calendar_blocks(plan, DIFF_MARKS)), "diff"),
            "",
        ]
    if plan.notifiers:
        head += [
            f"**Notifiers: {len(plan.notifiers)} change(s)**",
            "",
            fence(_notifier_blocks(plan, DIFF_MARKS), "diff"),
        ]
        head += [""]
    if plan.limits:
        head += [
            f"**Limits: {len(plan.limits)} change(s)**",
            "",
            fence(_capped(_limit_blocks(plan, DIFF_MARKS)), "diff"),
            "",
        ]
    if plan.paused:
        head += [
            f"⏸️ **Paused at runtime ({len(plan.paused)})**: not in git; an apply keeps a pause, "
            "`reconciler resume ID` ends it",
            "",
            fence(_capped([pause_line(p) for p in plan.paused]), "text"),
            "",
        ]
    changes = shown(plan)
    if not changes and not plan.notifiers and not plan.calendars and not plan.limits:
        head += ["No changes. The database matches the task files.", ""]
    tail = ["<sub>" + " · ".join(md_text(item) for item in _footer(plan)) + "</sub>"]
    used = sum(len(line) + 1 for line in head + tail)
    listing = len(id_listing([c.id for c in changes])) + 300  # what listing every id by kind takes
    body: list[str] = []
    placed = 0
    for change in changes:
        section = _section(change)
        if used + len(section) + 2 + listing > budget:
            break
        body += [section, ""]
        used += len(section) + 2
        placed += 1
    rest = changes[placed:]
    if rest:
        body += [f"**{len(rest)} more change(s)**, full plan in the job log:", ""]
        body += [line + "\n" for line in _remaining(rest, budget - used)]
    return "\n".join(head + body + tail)


# ---------------------------------------------------------------- json


def _masked(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    return mask_spec(spec) if spec is not None else None


def change_dict(change: Change) -> dict[str, object]:
    writes = change.writes or change.drift
    row = change.row
    live = {**row.spec, "enabled": row.enabled, "timezone": row.timezone} if writes and row is not None else None
    before = _masked(live)
    after = _masked(change.task.normalized) if writes and change.task is not None and change.op != "delete" else None
    excluded = change.preview.excluded
    return {
        "op": change.op,
        "id": change.id,
        "moved_from": change.moved_from,
        "fields": [
            {"path": f.path, "old": mask_path(f.path, f.old), "new": mask_path(f.path, f.new)} for f in change.fields
        ],
        "before": before,
        "after": after,
        "drift": change.drift,
        "drift_fields": [{"path": f.path, "live": f.old, "desired": f.new} for f in change.drift_fields],
        "next_fire_times": [utc_iso(t) for t in change.next_fire_times],
        "warnings": change.warnings,
        **({"excluded": [{"at": utc_iso(e.at), "reason": e.reason} for e in excluded]} if excluded else {}),
    }


def plan_dict(plan: Plan) -> dict[str, object]:
    """The json plan, format_version 2 (docs/reconcile.md, "Plan json")."""
    live = plan.live
    out: dict[str, object] = {
        "format_version": FORMAT_VERSION,
        "source": plan.source,
        "refused": plan.refused,
        "warnings": plan.warnings,
        "schema_missing": plan.schema_missing,
        "live_revision": {"revision": live.revision, "applied_at": utc_iso(live.applied_at)} if live else None,
        "changes": [change_dict(c) for c in plan.changes],
        "summary": plan.summary,
        "plan_digest": plan.digest,
        "state_fingerprint": plan.state_fingerprint,
        "files_fingerprint": plan.files_fingerprint,
    }
    if plan.paused:  # only then, as notifiers: a plan of tasks none of which is paused reads as before
        out["paused"] = [
            {
                "id": p["task_id"],
                "paused_by": p["paused_by"],
                "reason": p["reason"],
                "paused_at": utc_iso(p["paused_at"]),
                "paused_until": utc_iso(p["paused_until"]) if p["paused_until"] else None,
            }
            for p in plan.paused
        ]
    if plan.notifiers:  # only then: a plan without notifier changes reads as before
        out["notifiers"] = [
            {
                "op": n.op,
                "name": n.name,
                "fields": [
                    {"path": f.path, "old": mask_path(f.path, f.old), "new": mask_path(f.path, f.new)} for f in n.fields
                ],
                "before": _masked(n.before),
                "after": _masked(n.after),
            }
            for n in plan.notifiers
        ]
    if plan.calendars:  # likewise
        out["calendars"] = [
            {
                "op": c.op,
                "name": c.name,
                "fields": [{"path": f.path, "old": f.old, "new": f.new} for f in c.fields],
                "summary": calendar_summary(c.after or c.before or {}),
            }
            for c in plan.calendars
        ]
    if plan.limits:  # likewise
        out["limits"] = [
            {
                "op": c.op,
                "name": c.name,
                "fields": [{"path": f.path, "old": f.old, "new": f.new} for f in c.fields],
                "before": c.before,
                "after": c.after,
                "summary": limit_summary(c.after or c.before or {}),
            }
            for c in plan.limits
        ]
    return out


def plan_json(plan: Plan) -> str:
    return json.dumps(plan_dict(plan), indent=2, ensure_ascii=False)
