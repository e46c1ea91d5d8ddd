"""The container image's Dockerfile and the Kubernetes manifests that run it: linted, validated, consistent."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from reconciler.cli.parser import build_parser
from tests.ecosystem.packaging import PROJECT, tool

DOCKERFILE = PROJECT / "Dockerfile"
MANIFESTS = sorted((PROJECT / "deploy" / "kubernetes").glob("*.yaml"))
# The newest release the pinned validator knows; bump with kubernetes-validate.
KUBERNETES_VERSION = "1.37.0"


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("hadolint"), str(path)], capture_output=True, text=True, timeout=60)


def validate(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    argv = [tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, *map(str, paths)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per Dockerfile instruction, continuation lines joined, comments dropped."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    logical = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.strip().partition(" ") for line in logical.splitlines() if line.strip())
    ]


def test_dockerfile_is_hadolint_clean_and_hadolint_does_catch_an_unpinned_one(tmp_path: Path) -> None:
    clean = lint(DOCKERFILE)
    assert clean.returncode == 0 and not clean.stdout.strip(), clean.stdout + clean.stderr
    unpinned = tmp_path / "Dockerfile"
    unpinned.write_text("FROM python\nRUN pip install reconciler\n")
    assert lint(unpinned).returncode != 0


def test_kubernetes_manifests_validate_strictly_and_an_unknown_field_fails(tmp_path: Path) -> None:
    assert MANIFESTS
    valid = validate(MANIFESTS)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    docs = list(yaml.safe_load_all(MANIFESTS[0].read_text()))
    docs[0]["spec"]["template"]["spec"]["containers"][0]["healthcheck"] = "/healthz"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump_all(docs))
    assert validate([broken]).returncode != 0


def test_image_defaults_to_the_engine_serving_the_port_its_healthcheck_polls() -> None:
    steps = instructions(DOCKERFILE)
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    image = dict(final)
    assert image["FROM"] == "python:3.11-slim"
    assert image["USER"].split(":")[0] not in {"0", "root"}
    assert json.loads(image["ENTRYPOINT"]) == ["reconciler"]
    args = build_parser().parse_args(json.loads(image["CMD"]))
    assert args.command == "engine"
    port = args.metrics_addr.rsplit(":", 1)[1]
    assert image["EXPOSE"] == port
    # HEALTHCHECK [options] CMD ["python", "-c", "…urlopen('http://127.0.0.1:PORT/healthz'…"]
    probe = json.loads(image["HEALTHCHECK"].split(" CMD ", 1)[1])
    assert probe[:2] == ["python", "-c"]
    found = re.search(r"'(http://[^']+)'", probe[2])
    assert found, probe
    url = urlsplit(found.group(1))
    assert (url.hostname, str(url.port), url.path) == ("127.0.0.1", port, "/healthz")


def test_build_context_holds_what_the_builder_copies() -> None:
    """.dockerignore excludes everything but the wheel's sources; each COPY from the context must survive it."""
    kept = {line[1:] for line in (PROJECT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    copied = {
        src.rstrip("/")
        for word, rest in instructions(DOCKERFILE)
        if word == "COPY" and not rest.startswith("--from")
        for src in rest.split()[:-1]
    }
    assert copied and copied <= kept
    assert all((PROJECT / name).exists() for name in copied)
