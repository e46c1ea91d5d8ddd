"""What the commands say besides their result: lines on stderr, and the CLI's logger."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("reconciler.cli")


def err(line: str) -> None:
    print(line, file=sys.stderr)
