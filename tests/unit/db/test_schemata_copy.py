"""The package reads the repository's schemata.toml: reconciler/db/schemata.toml is a symlink to it in a
checkout (the wheel carries the file itself). A checkout that turned the link into a stale copy would
hide every table added since from the package, so the two must say the same."""

from __future__ import annotations

from pathlib import Path

from reconciler.db.schema import SCHEMATA

ROOT = Path(__file__).parents[3]


def test_the_package_reads_the_repositorys_schemata() -> None:
    assert SCHEMATA.read_text() == (ROOT / "schemata.toml").read_text(), (
        "reconciler/db/schemata.toml differs from schemata.toml: restore the link with "
        "`ln -sf ../../schemata.toml reconciler/db/schemata.toml`"
    )
