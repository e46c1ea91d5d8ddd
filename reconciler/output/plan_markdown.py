"""A plan as a pull-request comment (markdown): the verdict, a summary table, then one <details> block per change.

File content goes only inside fences longer than any backtick run in it, and text outside code is entity-escaped,
so nothing in it is markup, a mention or a reference. The comment always fits one GitHub comment: past a budget,
the remaining changes are listed by id only.
"""

from __future__ import annotations

import re

from reconciler.output.plan_lines import (
    DIFF_MARKS,
    EMOJI,
    change_head,
    details,
    diffs,
    drift_head,
    footer,
    kind_lines,
    marked_as,
    shown,
    summary_line,
    value_text,
    zone_of,
)
from reconciler.output.text import pause_line, safe
from reconciler.reconcile.plan import Change, Plan

GITHUB_COMMENT_LIMIT = 65_536
MARKDOWN_BUDGET = 64_000  # characters of a comment; the rest of the limit is headroom for the workflow's lines
LISTED_MESSAGES = 20  # refusals or warnings shown in a comment


def fence(lines: list[str], info: str = "") -> str:
    """A fenced code block that no line inside can close: longer than any backtick run in it."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return "\n".join([ticks + info, *lines, ticks])


def change_diff(change: Change) -> list[str]:
    """One change as ```diff lines: every line starts with +, - or !, so GitHub colours each kind."""
    mark = DIFF_MARKS[change.op] if change.writes else "!"
    lines = [f"{mark} {change_head(change)}"]
    if change.drift:
        lines.append(f"! {drift_head(change)}")
    for f in diffs(change):
        lines += [f"-     {f.path}: {value_text(f.path, f.old)}", f"+     {f.path}: {value_text(f.path, f.new)}"]
    lines += [f"{mark}     {line}" for line in details(change, zone_of(change))]
    return [safe(line) for line in lines]


def _section(change: Change) -> str:
    summary = f"<summary>{EMOJI[marked_as(change)]} {md_text(change_head(change))}</summary>"
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
    for found in plan.changed_kinds:
        title = f"**{found.kind.name.capitalize()}s: {len(found.changes)} change(s)**"
        retimed = sum(1 for c in plan.changes if any(f.path.startswith(f"{found.kind.name}s.") for f in c.fields))
        title += f", retiming {retimed} task(s)" if retimed else ""
        head += [title, "", fence(_capped(kind_lines(found, DIFF_MARKS)), "diff"), ""]
    if plan.paused:
        head += [
            f"⏸️ **Paused at runtime ({len(plan.paused)})**: not in git; an apply keeps a pause, "
            "`reconciler resume ID` ends it",
            "",
            fence(_capped([pause_line(p) for p in plan.paused]), "text"),
            "",
        ]
    changes = shown(plan)
    if not changes and not plan.changed_kinds:
        head += ["No changes. The database matches the task files.", ""]
    tail = ["<sub>" + " · ".join(md_text(item) for item in footer(plan)) + "</sub>"]
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
