"""An engine's id: --engine-id, else POD_NAME as is (Kubernetes), else HOST-PID."""

from __future__ import annotations

import os
import socket

import pytest

from reconciler.cli.options import engine_config
from reconciler.cli.parser import build_parser
from reconciler.engine.loop import default_engine_id


def test_pod_name_is_the_id_as_is() -> None:
    assert default_engine_id({"POD_NAME": "reconciler-engine-7d9f8-x2k4p", "HOSTNAME": "h"}) == (
        "reconciler-engine-7d9f8-x2k4p"
    )


@pytest.mark.parametrize("environ", [{}, {"POD_NAME": ""}, {"HOSTNAME": "elsewhere"}])
def test_without_a_pod_name_it_is_host_and_pid(environ: dict[str, str]) -> None:
    """Two engines on one host (systemd, a laptop) differ by their pids."""
    assert default_engine_id(environ) == f"{socket.gethostname()}-{os.getpid()}"


def test_engine_id_option_wins_over_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "pod-a")
    parse = build_parser().parse_args
    assert engine_config(parse(["engine"]), ()).engine_id == "pod-a"
    assert engine_config(parse(["engine", "--engine-id", "billing-1"]), ()).engine_id == "billing-1"
    monkeypatch.delenv("POD_NAME")
    assert engine_config(parse(["up"]), ("default",)).engine_id == f"{socket.gethostname()}-{os.getpid()}"
