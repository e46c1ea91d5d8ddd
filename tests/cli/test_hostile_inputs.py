"""Hostile task files and options (issue 17): one `path:LINE: key: message` line and exit 1, or accepted and working.

One table: each case is a task file (or a tasks directory it builds, or a command line) and the
error it must give — its key and words, and the line it must name — or "" when it must be
accepted. Each file case runs through `validate` and `next` in-process; some also through
`plan` and `apply` on a fresh database, some in a real `python -m reconciler` subprocess.
No case may ever print a traceback or a secret it was given.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.builders import run_main, run_reconciler
from tests.builders import task_text as task

URL = "http://127.0.0.1:9/hook"
CRON = 'kind = "cron"\nexpr = "0 * * * *"'
SECRET = "hunter2-literal"


def nested(open_: str, close: str, depth: int) -> str:
    return open_ * depth + "1" + close * depth


@dataclass(frozen=True)
class Case:
    """One hostile input and the one error line it must give (`key` "" means: accepted)."""

    id: str
    toml: str | None = None  # written to tasks.d/t.toml
    setup: Callable[[Path], object] | None = None  # builds more of the tasks directory
    argv: tuple[str, ...] = ()  # a command line instead of validate/next/plan/apply
    key: str = ""
    words: str = ""
    at: str | None = None  # text of the line the error must name; None: `line`
    line: int = 0  # the line the error must name when there is no `at`
    file: str = "t.toml"
    db: bool = False  # also through plan and apply
    spawn: bool = False  # also in a real subprocess
    secret: str | None = None  # must never be printed


def literal(table: str, name: str) -> Case:
    """A literal secret in `headers` or `query`: an error that never prints the value."""
    noun = "header" if table == "headers" else "query parameter"
    hint = f'; write {name} = {{ env = "NAME" }}' if table == "headers" else ""
    return Case(
        f"literal-{table}-{name}",
        task(target=f'{table} = {{ {name} = "{SECRET}" }}'),
        key=f"target.{table}",
        words=f"a literal {name} {noun} is a secret{hint}",
        at=table,
        secret=SECRET,
    )


def bad_url(name: str, url: str, words: str, secret: str | None = None) -> Case:
    return Case(f"url-{name}", task(url=url), key="target.url", words=words, at="url =", secret=secret)


def entry(name: str, build: Callable[[Path], object], words: str, **kw: Any) -> Case:
    """A tasks-directory entry that is not a readable task file."""
    return Case(f"fs-{name}", setup=build, key="(file)", words=words, file=name, **kw)


def option(argv: str, key: str, words: str = "", **kw: Any) -> Case:
    return Case("argv-" + argv.replace(" ", "_"), argv=tuple(argv.split()), key=key, words=words, **kw)


def fifo(root: Path) -> None:
    os.mkfifo(root / "fifo.toml")


def unreadable(root: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    (root / "locked.toml").write_text(task())
    (root / "locked.toml").chmod(0)


def outside(root: Path) -> None:
    (root.parent / "foreign.toml").write_text("SECRET-CONTENT = 1\n")
    (root / "outside.toml").symlink_to(root.parent / "foreign.toml")


INTERVAL = 'kind = "interval"\n'
CALENDAR = 'kind = "calendar"\nunit = "years"\nat = "09:00"\n'
DEEP_ARRAY = "target.json.a" + ".0" * 30
DEEP_TABLE = "target.json" + ".a" * 31

# fmt: off
CASES = [
    # NUL anywhere: PostgreSQL text and jsonb cannot hold it.
    Case("nul-description", task(r'description = "a\u0000b"'), key="description", words="NUL", at="desc", db=True,
         spawn=True),
    Case("nul-label-key", task(r'labels = { "a\u0000" = "x" }'), key=r"labels.a\x00", words="NUL", at="labels"),
    Case("nul-label-value", task(r'labels = { team = "\u0000" }'), key="labels.team", words="NUL", at="labels"),
    Case("nul-timezone", task(r'timezone = "UTC\u0000"'), key="timezone", words="NUL", at="timezone"),
    Case("nul-cron", task(trigger='kind = "cron"\nexpr = "0 * * * *\\u0000"'), key="trigger.expr", words="NUL",
         at="expr"),
    Case("nul-body", task(target=r'body = "x\u0000"'), key="target.body", words="NUL", at="body"),
    Case("nul-json-string", task(target=r'json = { a = ["ok", "\u0000"] }'), key="target.json.a.1", words="NUL",
         at="json"),
    Case("nul-json-key", task(target=r'json = { "k\u0000" = 1 }'), key=r"target.json.k\x00", words="NUL", at="json"),
    Case("nul-header-value", task(target=r'headers = { X-A = "\u0000" }'), key="target.headers.X-A", words="NUL",
         at="headers"),
    Case("nul-header-name", task(target=r'headers = { "X\u0000" = "v" }'), key=r"target.headers.X\x00",
         words="NUL", at="headers"),
    Case("nul-env-name", task(target=r'headers = { X-A = { env = "A\u0000" } }'), key="target.headers.X-A.env",
         words="NUL", at="headers"),
    Case("nul-query", task(target=r'query = { q = "\u0000" }'), key="target.query.q", words="NUL", at="query"),
    Case("nul-url", task(url=r"http://h/\u0000"), key="target.url", words="NUL", at="url"),
    # Control characters where a line of text goes on the wire or a terminal.
    Case("header-crlf", task(target=r'headers = { X-A = "a\r\nX-Injected: 1" }'), key="target.headers.X-A",
         words="control character '\\r'", at="headers"),
    Case("header-non-ascii", task(target='headers = { X-A = "grüße" }'), key="target.headers.X-A",
         words="visible ASCII", at="headers"),
    Case("header-del", task(target=r'headers = { X-A = "a\u007f" }'), key="target.headers.X-A", words="control",
         at="headers"),
    Case("header-name-space", task(target='headers = { "X A" = "v" }'), key="target.headers.X A",
         words="not an HTTP token", at="headers"),
    Case("header-name-colon", task(target='headers = { "X:A" = "v" }'), key="target.headers.X:A",
         words="not an HTTP token", at="headers"),
    Case("header-engine-set", task(target='headers = { Idempotency-Key = "k" }'), key="target.headers",
         words="the engine sets Idempotency-Key", at="headers"),
    Case("header-framing", task(target='headers = { Content-Length = "5" }'), key="target.headers",
         words="the HTTP client sets Content-Length", at="headers"),
    Case("header-twice", task(target='headers = { X-A = "1", x-a = "2" }'), key="target.headers",
         words="same header", at="headers"),
    Case("description-escape", task(r'description = "\u001b[31mred"'), key="description",
         words="control character '\\x1b'", at="description"),
    Case("label-newline", task(r'labels = { team = "a\nb" }'), key="labels.team", words="control", at="labels"),
    Case("query-tab", task(target=r'query = { q = "a\tb" }'), key="target.query.q", words="control", at="query"),
    Case("query-no-name", task(target='query = { "" = "v" }'), key='target.query.""', words="needs a name",
         at="query"),
    # Credentials are never literal.
    *[literal("headers", name) for name in ("Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key",
                                        "X-Auth-Token", "X-Client-Secret", "X-Password")],
    *[literal("query", name) for name in ("token", "api_key", "sig", "X-Amz-Signature")],
    # NaN and infinity: finite floats only.
    Case("json-nan", task(target="json = { a = nan }"), key="target.json.a", words="not a finite number",
         at="json", db=True),
    Case("json-inf-in-array", task(target="json = { a = [1, -inf] }"), key="target.json.a.1",
         words="not a finite number", at="json"),
    Case("timeout-nan", task(target="timeout_seconds = nan"), key="target.timeout_seconds",
         words="not a finite number", at="timeout"),
    Case("timeout-inf", task(target="timeout_seconds = +inf"), key="target.timeout_seconds",
         words="not a finite number", at="timeout"),
    Case("backoff-inf", task(policy="retry_backoff_seconds = inf"), key="policy.retry_backoff_seconds",
         words="not a finite number", at="retry_backoff"),
    Case("timeout-1e308", task(target="timeout_seconds = 1e308"), key="target.timeout_seconds", words="3600",
         at="timeout"),
    Case("timeout-minus-zero", task(target="timeout_seconds = -0.0"), key="target.timeout_seconds",
         words="more than 0", at="timeout"),
    # Integers: 64-bit in TOML, each field within what the engine and PostgreSQL (int4) can act on.
    Case("seconds-beyond-int64", task(trigger=INTERVAL + "seconds = 99999999999999999999"), key="trigger.seconds",
         words="64-bit", at="seconds", db=True),
    Case("seconds-int64-max", task(trigger=INTERVAL + "seconds = 9223372036854775807"), key="trigger.seconds",
         words="at most 3153600000", at="seconds"),
    Case("seconds-float", task(trigger=INTERVAL + "seconds = 1e20"), key="trigger.seconds", words="integer",
         at="seconds"),
    Case("seconds-5000-digits", task(trigger=INTERVAL + "seconds = " + "9" * 5000), key="toml", words="64-bit",
         at="seconds"),
    Case("every-3000000d", task(trigger=INTERVAL + 'every = "3000000d"'), key="trigger.every", words="100 years",
         at="every"),
    Case("every-20-digits", task(trigger=INTERVAL + 'every = "99999999999999999999s"'), key="trigger.every",
         words="not a positive duration", at="every"),
    Case("calendar-every-huge", task(trigger=CALENDAR + "every = 999999999999\nstart_at = 2026-01-01"),
         key="trigger.every", words="1000", at="every"),
    Case("keep-runs-int4", task(policy="keep_runs = 2147483648"), key="policy.keep_runs", words="1000000",
         at="keep_runs", db=True, spawn=True),
    Case("keep-runs-int64-min", task(policy="keep_runs = -9223372036854775808"), key="policy.keep_runs",
         words="at least 1", at="keep_runs"),
    Case("misfire-huge", task(policy="misfire_grace_seconds = 99999999999"), key="policy.misfire_grace_seconds",
         words="31622400", at="misfire"),
    Case("instances-int4", task(policy="max_running_instances = 2147483648"), key="policy.max_running_instances",
         words="1000", at="max_running"),
    Case("retries-wait-years", task(policy="retries = 20"), key="policy", words="more than one day", at="[policy]"),
    Case("json-int-beyond-int64", task(target="json = { n = 9223372036854775808 }"), key="target.json.n",
         words="64-bit", at="json"),
    # Instants: years 1970 to 9000, so no zone or schedule step leaves datetime's range.
    Case("once-9999-los-angeles",
         task('timezone = "America/Los_Angeles"', trigger='kind = "once"\nat = 9999-12-31T23:59:59'),
         key="trigger.at", words="outside the supported years 1970 to 9000", at="at =", db=True),
    Case("start-9999-kiritimati",
         task('timezone = "Pacific/Kiritimati"', trigger=CRON + "\nstart_at = 9999-12-31T23:59:59"),
         key="trigger.start_at", words="outside the supported years", at="start_at"),
    Case("end-year-1", task(trigger=CRON + "\nend_at = 0001-01-01T00:00:00Z"), key="trigger.end_at",
         words="outside the supported years", at="end_at"),
    Case("once-9999-west-offset", task(trigger='kind = "once"\nat = 9999-12-31T23:59:59-12:00'), key="trigger.at",
         words="outside the supported years", at="at ="),
    Case("once-1969", task(trigger='kind = "once"\nat = 1969-12-31T23:59:59Z'), key="trigger.at",
         words="outside the supported years", at="at ="),
    Case("calendar-anchor-year-1", task(trigger=CALENDAR + "start_at = 0001-01-01"), key="trigger.start_at",
         words="outside the supported years", at="start_at"),
    Case("calendar-anchor-9999", task(trigger=CALENDAR + "start_at = 9999-12-31"), key="trigger.start_at",
         words="outside the supported years", at="start_at"),
    # Nesting and size.
    Case("deep-array-40", task(target="json = { a = " + nested("[", "]", 40) + " }"), key=DEEP_ARRAY,
         words="32 levels", at="json"),
    Case("deep-table-40", task(target="json = " + nested("{ a = ", " }", 40)), key=DEEP_TABLE, words="32 levels",
         at="json"),
    Case("deep-array-5000", task("a = " + nested("[", "]", 5000)), key="toml", words="32 levels", at="a = ",
         spawn=True),
    Case("deep-table-5000", task(target="json = " + nested("{ a = ", " }", 5000)), key="toml", words="32 levels",
         at="json"),
    Case("file-over-1-mib", task('description = "' + "x" * (1 << 20) + '"'), key="(file)", words="1024 KiB"),
    # URLs: http(s), a valid host, a port 1-65535, no credentials.
    bad_url("userinfo", "http://admin:s3cret-pw@127.0.0.1/", "credentials in the URL are not allowed",
            secret="s3cret-pw"),
    bad_url("user-only", "http://admin@127.0.0.1/", "credentials in the URL are not allowed"),
    bad_url("port-99999", "http://127.0.0.1:99999/", "Port out of range"),
    bad_url("port-abc", "http://127.0.0.1:abc/", "Port could not be cast"),
    bad_url("port-0", "http://127.0.0.1:0/", "port 0"),
    bad_url("ipv6-unclosed", "http://[::1/x", "Invalid IPv6 URL"),
    bad_url("ipv6-bad", "http://[::g]/", "IPv6"),
    bad_url("ipv4-bad", "http://999.1.1.1/", "not a valid IPv4 address"),
    bad_url("non-ascii-host", "http://bücher.example/", "punycode form (xn--bcher-kva.example)"),
    bad_url("space", "http://h/a b", "whitespace"),
    bad_url("no-host", "http:///x", "not an http:// or https:// URL"),
    bad_url("file-scheme", "file:///etc/passwd", "not an http:// or https:// URL"),
    bad_url("too-long", "http://h/" + "a" * 8000, "at most 8000 characters"),
    Case("token-url-userinfo",
         task(target='[target.auth]\nkind = "oauth2_client_credentials"\ntoken_url = "http://id:pw-x@idp/t"\n'
              'client_id = "c"\nclient_secret = { env = "S" }'),
         key="target.auth.token_url", words="credentials in the URL", at="token_url", secret="pw-x"),
    # Entries of the tasks directory that are not task files: an error each, never skipped.
    entry("dir.toml", lambda root: (root / "dir.toml").mkdir(), "is a directory", db=True),
    entry("dangling.toml", lambda root: (root / "dangling.toml").symlink_to(root / "gone.toml"), "broken symlink"),
    entry("loop.toml", lambda root: (root / "loop.toml").symlink_to(root / "loop.toml"), "symlink loop"),
    entry("outside.toml", outside, "outside the tasks directory", secret="SECRET-CONTENT", db=True),
    entry("linked", lambda root: (root / "linked").symlink_to(root.parent), "outside the tasks directory"),
    entry("fifo.toml", fifo, "not a regular file", spawn=True),
    entry("locked.toml", unreadable, "Permission denied"),
    entry("latin1.toml", lambda root: (root / "latin1.toml").write_bytes(b'description = "\xe9"\n'),
          "not UTF-8 text: byte 0xE9 in column 16", line=1),
    # Accepted at the edges: validate, next (near the end of year 9000), plan and apply all work.
    Case("ok-integer-edges",
         task(trigger=INTERVAL + "seconds = 3153600000", policy="keep_runs = 1000000\n"
              "misfire_grace_seconds = 31622400\nmax_running_instances = 1000\nretries = 10\n"
              "retry_backoff_seconds = 84"), db=True),
    Case("ok-last-second-of-9000-kiritimati",
         task('timezone = "Pacific/Kiritimati"', trigger='kind = "once"\nat = 9000-12-31T23:59:59'), db=True),
    Case("ok-last-second-of-9000-los-angeles",
         task('timezone = "America/Los_Angeles"', trigger=CRON + "\nend_at = 9000-12-31T23:59:59")),
    Case("ok-calendar-1000-years", task(trigger=CALENDAR + "every = 1000\nstart_at = 9000-12-31")),
    Case("ok-first-day-of-1970-tokyo",
         task('timezone = "Asia/Tokyo"', trigger=INTERVAL + 'every = "1s"\nstart_at = 1970-01-01T00:00:00')),
    Case("ok-ipv6-port-query", task(target='query = { page = "2", token = { env = "T" } }',
                                    url="http://[::1]:65535/x?y=1"), db=True),
    Case("ok-float-edges", task(target="json = { a = 1e308, b = -0.0, c = 9223372036854775807 }",
                                policy="retry_backoff_seconds = 0.0")),
    Case("ok-text-controls", task('description = """two\n\tlines"""', target=r'body = "a\r\nb\u0001c"')),
    Case("ok-deep-32", task(target="json = { a = " + nested("[", "]", 29) + " }")),
    # Options: bounded, finite, one argparse error line naming the option.
    option("runs --limit -1", "--limit", "at least 1 and at most 100000", spawn=True),
    option("runs --limit 0", "--limit"),
    option("runs --limit 100001", "--limit"),
    option("runs --limit abc", "--limit", "not an integer"),
    option("next --count 0", "--count"),
    option("next --count 10001", "--count"),
    option("watch --debounce-ms -5", "--debounce-ms"),
    option("up --debounce-ms 600001", "--debounce-ms"),
    option("engine --keep-runs-days nan", "--keep-runs-days"),
    option("engine --keep-runs-days 1e10", "--keep-runs-days"),
    option("engine --keep-runs-days -1", "--keep-runs-days", "at least 0"),
    option("engine --lease-margin nan", "--lease-margin"),
    option("engine --lease-margin -1", "--lease-margin"),
    option("engine --max-sleep inf", "--max-sleep"),
    option("engine --drain-seconds nan", "--drain-seconds"),
    option("engine --drain-seconds -1", "--drain-seconds"),
    option("engine --concurrency 0", "--concurrency"),
    option("engine --batch 10001", "--batch"),
    option("engine --metrics-addr 127.0.0.1:notaport", "--metrics-addr", "port from 0 to 65535"),
    option("engine --metrics-addr 127.0.0.1:65536", "--metrics-addr"),
    option("engine --metrics-addr [::1:9100", "--metrics-addr"),
    option("engine --metrics-addr localhost", "--metrics-addr"),
    option("up --metrics-addr [::g]:9100", "--metrics-addr", "IPv6"),
    option("apply --max-deletes -1", "--max-deletes"),
    option("next --after 9999-12-31T23:59:59", "--after", "outside the supported years 1970 to 9000", spawn=True),
    option("next --after 0001-01-01T00:00:00", "--after", "outside the supported years"),
    option("next --after 1969-12-31T23:59:59+00:00", "--after", "outside the supported years"),
    option("explain x --at 0001-01-01T00:00:00", "--at", "outside the supported years"),
    option("explain x --at 9001-01-01", "--at", "outside the supported years"),
    Case("argv-ok-next-past-9000", task(trigger=INTERVAL + 'every = "1s"'),
         argv=("next", "--after", "9000-12-31T23:59:59", "--count", "10000")),
]
# fmt: on


def modes(case: Case) -> list[str]:
    found = ["argv"] if case.argv else ["validate", "next"]
    if case.db:
        found += ["plan", "apply"]
    if case.spawn:
        found.append("subprocess")
    return found


PARAMS = [pytest.param(case, mode, id=f"{case.id}-{mode}") for case in CASES for mode in modes(case)]


def run(argv: list[str], spawn: bool, cwd: Path) -> tuple[int, str, str]:
    """Exit code, stdout, stderr of the CLI, in-process or as `python -m reconciler`."""
    if spawn:
        done = run_reconciler(*argv, cwd=cwd, timeout=60)
        return done.returncode, done.stdout, done.stderr
    return run_main(argv)


def expected_line(case: Case) -> int:
    if case.at is None or case.toml is None:
        return case.line
    return next(n for n, line in enumerate(case.toml.splitlines(), start=1) if case.at in line)


@pytest.mark.parametrize(("case", "mode"), PARAMS)
def test_hostile_input_gives_one_error_line_or_works(
    case: Case, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "tasks.d"
    root.mkdir()
    if case.toml is not None:
        (root / "t.toml").write_text(case.toml, encoding="utf-8")
    if case.setup is not None:
        case.setup(root)
    argv = ["--tasks-dir", str(root)]
    if mode in ("plan", "apply"):
        argv += ["--dsn", request.getfixturevalue("dsn")]
    if case.argv:
        argv += case.argv
    elif mode == "next":
        argv += ["next", "--count", "3", "--after", "9000-12-30T00:00:00Z"]
    else:
        argv.append("validate" if mode == "subprocess" else mode)

    code, out, err = run(argv, spawn=mode == "subprocess", cwd=tmp_path)

    assert "Traceback" not in out + err, err
    if case.secret:
        assert case.secret not in out + err
    if not case.key:
        assert code == 0, err
        return
    assert code != 0
    lines = err.splitlines()
    if case.argv:  # argparse adds its usage lines; the error is the one line that says so
        [line] = [line for line in lines if "error:" in line]
        assert case.key in line and case.words in line, line
        return
    assert lines[-1] == f"1 error(s) in {root}; nothing was changed", err
    [line] = lines[:-1]
    assert line.startswith(f"{root}/{case.file}:{expected_line(case)}: {case.key}: "), line
    assert case.words in line, line
