"""The parts of the documentation that are the code's output, and the one command that rewrites them:

    python -m tests.generated_docs

(from the repository root). Each part sits between `<!-- BEGIN generated: NAME -->` and
`<!-- END generated: NAME -->`; tests/unit/db/test_privileges.py fails while one differs from what the
code prints now, naming this command.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from reconciler.db.grants import privilege_table
from tests.builders import run_main

ROOT = Path(__file__).resolve().parents[1]
DEPLOY_README = ROOT / "deploy" / "README.md"
COMMAND = "python -m tests.generated_docs"

# The role names deploy/README.md shows, by kind: `reconciler db grants --role-KIND NAME …` prints its GRANTs.
ROLES = {
    "planner": "reconciler_plan",
    "applier": "reconciler_apply",
    "engine": "reconciler_engine",
    "dashboard": "reconciler_dashboard",
}


def grants_block() -> str:
    """The command, as the owner runs it, and what it prints (run through the CLI)."""
    options = [f"--role-{kind} {name}" for kind, name in ROLES.items()]
    code, out, err = run_main(["db", "grants", *" ".join(options).split()])
    assert code == 0, err
    command = f'reconciler db grants {options[0]} {options[1]} \\\n    {options[2]} {options[3]} | psql "$OWNER_DSN"'
    return f"```sh\n{command}\n```\n\nprints:\n\n```sql\n{out}```"


# (file, part name) → the part's text now.
PARTS: dict[tuple[Path, str], Callable[[], str]] = {
    (DEPLOY_README, "privilege-table"): privilege_table,
    (DEPLOY_README, "grants"): grants_block,
}


def _span(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN generated: {name} -->\n)(.*?)(^<!-- END generated: {name} -->)", re.S | re.M)


def part(path: Path, name: str) -> str:
    """The part `name` as `path` holds it (without its marks' lines)."""
    found = _span(name).search(path.read_text())
    assert found, f"{path.relative_to(ROOT)}: no part {name!r} between its BEGIN and END marks"
    return found[2]


def regenerate() -> list[Path]:
    """Rewrite every part from the code (what `make()` returns, and a newline); the files that changed."""
    changed = []
    for path in dict.fromkeys(path for path, _ in PARTS):
        text = old = path.read_text()
        for (where, name), make in PARTS.items():
            if where == path:
                part(path, name)  # the marks are there
                new = make() + "\n"
                text = _span(name).sub(lambda m: m[1] + new + m[3], text)  # noqa: B023 (used at once)
        if text != old:
            path.write_text(text)
            changed.append(path)
    return changed


if __name__ == "__main__":
    for path in regenerate():
        print(f"rewrote {path.relative_to(ROOT)}")
