"""The deployment examples are valid and pass only options the CLI accepts."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import yaml

from reconciler.cli.parser import build_parser
from reconciler.engine.loop import default_engine_id

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_kubernetes_engine_has_three_replicas_probes_and_valid_args() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "engine.yaml").read_text()))
    engine = next(d for d in docs if d["metadata"]["name"] == "reconciler-engine")
    assert engine["spec"]["replicas"] == 3
    every = [c for d in docs for c in d["spec"]["template"]["spec"]["containers"]]
    containers = [c for c in every if c["image"].startswith("ghcr.io/ORG/reconciler:")]
    assert len(containers) == 2
    for container in containers:
        # The image's ENTRYPOINT is `reconciler` (see the Dockerfile): args are reconciler's own arguments.
        assert "command" not in container
        args = build_parser().parse_args(container["args"])
        assert args.command == "engine" and args.metrics_addr.endswith(":9464")
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert {e["name"] for e in container["env"]} >= {"RECONCILER_DSN"}
        # The engine's id is the pod's name (default_engine_id reads POD_NAME): one engine per pod.
        [pod_name] = [e for e in container["env"] if e["name"] == "POD_NAME"]
        assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert default_engine_id({"POD_NAME": "reconciler-engine-abc12"}) == "reconciler-engine-abc12"


def test_kubernetes_engines_on_every_interface_never_serve_an_open_dashboard() -> None:
    """0.0.0.0 reaches the pod from the whole cluster: the dashboard wants a token from a Secret, or is off."""
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "engine.yaml").read_text()))
    every = [c for d in docs for c in d["spec"]["template"]["spec"]["containers"]]
    for container in (c for c in every if c["image"].startswith("ghcr.io/ORG/reconciler:")):
        args = build_parser().parse_args(container["args"])
        assert args.metrics_addr.startswith("0.0.0.0:")
        if args.no_dashboard:
            continue
        assert args.dashboard_token_env, container["name"]
        [token] = [e for e in container["env"] if e["name"] == args.dashboard_token_env]
        assert "secretKeyRef" in token["valueFrom"]


def test_systemd_unit_runs_a_valid_engine_command() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read_string((DEPLOY / "systemd" / "reconciler-engine.service").read_text())
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0].endswith("/reconciler")
    args = build_parser().parse_args(argv[1:])
    assert args.command == "engine" and args.keep_runs_days == 30
    assert unit["Service"]["KillSignal"] == "SIGTERM"


def test_retention_is_on_by_default_and_zero_keeps_every_run() -> None:
    from reconciler.cli.options import engine_config

    assert build_parser().parse_args(["engine"]).keep_runs_days == 30
    assert engine_config(build_parser().parse_args(["engine"]), ()).keep_runs_days == 30
    assert engine_config(build_parser().parse_args(["engine", "--keep-runs-days", "0"]), ()).keep_runs_days is None
    assert engine_config(build_parser().parse_args(["up", "--keep-runs-days", "0.5"]), ()).keep_runs_days == 0.5
