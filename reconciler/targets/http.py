"""HTTP firing on aiohttp: the request, retries with backoff, bearer/basic/OAuth2 auth and the token cache.

Every attempt has one deadline (`timeout_seconds`: connect, send, headers and body), reads
at most the stored excerpt of the response, and runs inside a concurrency slot that backoff
waits do not hold. Secrets are resolved from the environment at fire time (see
`environment`) and scrubbed from the excerpt and the error; only variable names appear.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import hashlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
import yarl

from reconciler.clock import DATABASE, utc_stamp
from reconciler.spec.backoff import backoff_delay
from reconciler.spec.environment import EnvPolicy
from reconciler.spec.target import HEADER_VALUE, BasicAuth, BearerAuth, OAuth2ClientCredentials, Target
from reconciler.spec.task import TaskSpec
from reconciler.spec.values import EnvRef
from reconciler.targets.oauth import TokenCache, TokenError
from reconciler.targets.request import Request, compact_json
from reconciler.targets.secrets import EnvProblem, RunSecrets
from reconciler.tracing import Tracer, new_span_id

EXCERPT_BYTES = 1024
MAX_RETRY_AFTER = 3600.0


@dataclass
class Attempt:
    """The outcome of one HTTP attempt."""

    attempt: int
    http_status: int | None = None
    error: str | None = None
    duration_ms: int = 0
    excerpt: str | None = None
    retry_after: float | None = None
    sent_at: float = 0.0  # when the request left, by the database's clock (DATABASE.timestamp())
    transient: bool = False  # a failure that a retry may cure: connect error, cut-off response, 5xx, 429

    @property
    def ok(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300 and self.error is None


@dataclass
class Outcome:
    """The final result of a run (all attempts)."""

    status: str  # succeeded | failed | accepted (a job's: its target took it, its outcome comes later)
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]


class RequestProblem(Exception):
    """The request cannot be built (a header value, a variable the task may not read); not retried."""


def idempotency_key(task_id: str, scheduled_for: datetime, manual_run: int | None = None) -> str:
    """`<task id>@<scheduled_for UTC>`: the same for every attempt of one occurrence.

    A manual run has `<task id>@manual-<run id>`: its own, never a scheduled occurrence's
    (those end in a date), never another manual run's.
    """
    if manual_run is not None:
        return f"{task_id}@manual-{manual_run}"
    return f"{task_id}@{utc_stamp(scheduled_for)}"


def jitter_seconds(key: str, jitter: int) -> float:
    """A delay in [0, jitter] that is the same for the same occurrence (idempotency `key`) on every replica."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter * 1000 + 1) / 1000


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), capped at MAX_RETRY_AFTER."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, min((when - DATABASE.now()).total_seconds(), MAX_RETRY_AFTER))  # the target's date vs ours


def header_value(name: str, value: str | EnvRef, secrets: RunSecrets, key: str) -> str:
    """A header value that an HTTP client can send (visible ASCII); the error never shows the value."""
    resolved = secrets.resolve(value, key)
    if not HEADER_VALUE.fullmatch(resolved):
        origin = f" (from environment variable {value.env})" if isinstance(value, EnvRef) else ""
        raise RequestProblem(
            f"invalid header value for {name}{origin}: only visible ASCII, spaces and tabs can be sent"
        )
    return resolved


OnAttempt = Callable[[Attempt], Awaitable[None]]


class NotPrepared(Exception):
    """A job's attempt could not be made ready: not sent; retried by the policy when `transient` (its token could
    not be recorded: the database away), not when its run is no longer running."""

    def __init__(self, reason: str, transient: bool = True) -> None:
        super().__init__(reason)
        self.transient = transient


MIN_TOKEN_WAIT = 0.05  # a request waiting for a token asks again no sooner (the limit's lock is the claims' too)
TOKEN_RETRY_SECONDS = 1.0  # …and after this long when asking failed (the database away)
Token = Callable[[], Awaitable[float]]  # a retry's token of its rate limits: 0 when taken, else the seconds to wait


def _classify(exc: BaseException, timeout: float) -> tuple[str, bool]:
    """An exception raised while sending → (reason, transient)."""
    if isinstance(exc, TimeoutError):
        return f"timeout after {timeout:g} s (timeout_seconds: connect, send, headers and body)", False
    if isinstance(exc, RequestProblem | EnvProblem | TokenError):
        return str(exc), False
    if isinstance(exc, NotPrepared):
        return str(exc), exc.transient
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Refused, DNS, TLS handshake: the request surely did not leave.
        return f"connect error: {type(exc).__name__}", True
    if isinstance(exc, aiohttp.ClientError):
        # The request may have been delivered; retried like a 5xx, the reason recorded.
        return f"response error: {type(exc).__name__} after the request was sent", True
    return f"request error: {type(exc).__name__}", False


async def read_excerpt(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most `limit` bytes of the body; whatever else the target sends is never read."""
    chunks = bytearray()
    # Not a read once the body has ended (no body at all, as most targets answer): it would only say so.
    while len(chunks) < limit and not response.content.at_eof():
        chunk = await response.content.read(limit - len(chunks))
        if not chunk:
            break
        chunks += chunk
    return bytes(chunks)


def redirect_hint(response: aiohttp.ClientResponse, secrets: RunSecrets) -> str:
    """For a redirect (never followed: the request's method, body and credentials would go where it says):
    where it points, without credentials or query string, so the fix is plain. A path that holds a secret
    (a target may echo the request into it, in an encoding of its own) is left out."""
    location = response.headers.get("Location")
    if not 300 <= response.status < 400 or not location:
        return ""
    try:
        where = response.url.join(yarl.URL(location)).with_user(None).with_query(None).with_fragment(None)
    except ValueError:
        return "; redirects are not followed"
    text = str(where)
    if secrets.scrub(where.path) != where.path or secrets.scrub(text) != text:
        text = str(where.with_path("/")) + "…"
    shown = "".join(ch if ch.isprintable() else "?" for ch in text)[:200]
    return f"; redirects to {shown}, which is not followed: set the url to it"


@functools.lru_cache(maxsize=50_000)  # as many as the engine keeps compiled specs (claim.MAX_COMPILED)
def parsed_url(text: str) -> yarl.URL:
    """A target's URL, parsed once (when its spec is compiled, see claim.py), not on every request."""
    return yarl.URL(text)


def new_session(connections: int) -> aiohttp.ClientSession:
    """The engine's HTTP client: at most `connections` open, no proxy from the environment, and no
    cookie jar: a cookie one target sets is never sent with another run's request."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, limit_per_host=0),
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None),  # each attempt's deadline is an asyncio.timeout (see _send)
        trust_env=False,
        json_serialize=compact_json,
    )


class Firer:
    """Sends task requests over one aiohttp session; `concurrency` attempts at a time."""

    def __init__(
        self, concurrency: int = 20, env: Mapping[str, str] | None = None, policy: EnvPolicy | None = None
    ) -> None:
        self.concurrency = concurrency
        self.slots = asyncio.Semaphore(concurrency)
        self.env: Mapping[str, str] = env if env is not None else os.environ
        self.policy = policy or EnvPolicy()
        self.tokens = TokenCache(self.session)
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self.tracer = Tracer()  # the engine's (Engine sets it): spans of attempts, when it records any
        self.resting = 0  # runs waiting out a jitter or backoff (they hold no slot)
        self.on_rest: Callable[[], None] | None = None  # told when a run starts a rest (Engine._fill)
        self.sent = 0  # attempts made, and the seconds they held their slots: the capacity (see Engine)
        self.slot_seconds = 0.0
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        """The engine's one session, made on first use (inside the running loop)."""
        if self._session is None or self._session.closed:
            # A few connections more than attempts: token requests are made while holding a slot.
            self._session = new_session(self.concurrency + 8)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def secrets(self) -> RunSecrets:
        """A fresh resolver for one run."""
        return RunSecrets(self.env, self.policy)

    async def _headers(
        self, request: Request, attempt: Attempt, span_id: str | None, secrets: RunSecrets, extra: Mapping[str, str]
    ) -> dict[str, str]:
        target = request.target
        headers = {
            name: header_value(name, value, secrets, f"target.headers.{name}") for name, value in target.headers.items()
        }
        headers.update(extra)
        attempt.sent_at = DATABASE.timestamp()
        headers.update(request.headers(attempt.attempt, span_id, attempt.sent_at, secrets))
        auth = target.auth
        if isinstance(auth, BearerAuth):
            token = header_value("Authorization", auth.token, secrets, "target.auth.token")
            headers["Authorization"] = "Bearer " + token
        elif isinstance(auth, OAuth2ClientCredentials):
            headers["Authorization"] = "Bearer " + await self.tokens.get(auth, secrets)
        elif isinstance(auth, BasicAuth):
            username = header_value("Authorization", auth.username, secrets, "target.auth.username")
            password = header_value("Authorization", auth.password, secrets, "target.auth.password")
            headers["Authorization"] = aiohttp.encode_basic_auth(username, password)
            secrets.remember_basic(password, headers["Authorization"])
        return headers

    @staticmethod
    def _url(target: Target, secrets: RunSecrets) -> yarl.URL:
        """The URL the request is sent to, with `target.query` added; a secret's value is remembered in the
        form the URL carries it too (yarl's: `/` kept, `+ =` percent-encoded), so an echo of it is scrubbed."""
        url = parsed_url(target.url)
        if not target.query:
            return url
        params = {name: secrets.resolve(value, f"target.query.{name}") for name, value in target.query.items()}
        url = url.extend_query(params)
        if secrets.values:  # extend_query appends its pairs in order, each value encoded: no `&` inside one
            for value, pair in zip(params.values(), url.raw_query_string.split("&")[-len(params) :], strict=True):
                secrets.remember_sent(value, pair.partition("=")[2])
        return url

    async def _exchange(self, request: Request, attempt: Attempt, secrets: RunSecrets, span_id: str | None) -> None:
        """Build, send and read one attempt (the caller bounds it with the deadline)."""
        target = request.target
        url = self._url(target, secrets)
        session = self.session()
        extra: dict[str, str] = {}
        if request.prepare is not None:
            extra, hidden = await request.prepare(attempt.attempt)
            secrets.remember(*hidden, *extra.values())
        for refresh in (False, True):
            headers = await self._headers(request, attempt, span_id, secrets, extra)
            async with session.request(
                target.method, url, headers=headers, data=request.body, allow_redirects=False
            ) as response:
                is_oauth = isinstance(target.auth, OAuth2ClientCredentials)
                if response.status == 401 and is_oauth and not refresh:
                    # One refresh-and-retry: the cached token may have been revoked early.
                    assert isinstance(target.auth, OAuth2ClientCredentials)
                    await self.tokens.get(target.auth, secrets, force=True)
                    continue
                attempt.http_status = response.status
                attempt.retry_after = parse_retry_after(response.headers.get("Retry-After"))
                # Read past the excerpt by the widest echo of a secret, so one cut at the end is still redacted whole.
                raw = await read_excerpt(response, EXCERPT_BYTES + secrets.longest)
                if not response.content.at_eof():
                    response.close()  # do not drain an endless body: drop the connection
                attempt.excerpt = secrets.excerpt(raw, EXCERPT_BYTES)
                if not attempt.ok:
                    attempt.error = f"HTTP {response.status}" + redirect_hint(response, secrets)
                    attempt.transient = response.status >= 500 or response.status == 429
                return

    async def send(self, request: Request, number: int, budget: float) -> Attempt:
        """One attempt of `request`, within its target's timeout and `budget` seconds; never raises."""
        if request.trace is None or not self.tracer.enabled:  # no span: an id for its traceparent is all it needs
            span_id = new_span_id() if request.trace is not None else None
            return await self._send(request, Attempt(number), budget, span_id)
        attributes = {
            "reconciler.task_id": request.task_id,
            "reconciler.run_id": request.run_id,
            "reconciler.attempt": number,
            "http.request.method": request.target.method,
            "server.address": parsed_url(request.target.url).host,
        }
        with self.tracer.attempt(request.trace, attributes) as span:
            attempt = await self._send(request, Attempt(number), budget, span.span_id)
            span.attributes["http.response.status_code"] = attempt.http_status
            span.error = attempt.error
        return attempt

    async def _send(self, request: Request, attempt: Attempt, budget: float, span_id: str | None) -> Attempt:
        secrets = self.secrets()
        timeout = min(float(request.target.timeout_seconds), budget)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                await self._exchange(request, attempt, secrets, span_id)
        except Exception as exc:  # every failure of one attempt is that attempt's result
            reason, attempt.transient = _classify(exc, timeout)
            if timeout < request.target.timeout_seconds and isinstance(exc, TimeoutError):
                reason += "; cut short to end before the run's lease"
            attempt.error = reason
            attempt.http_status = attempt.http_status if isinstance(exc, TimeoutError) else None
        attempt.error = secrets.scrub(attempt.error)
        attempt.duration_ms = round((time.perf_counter() - started) * 1000)
        return attempt

    async def fire(
        self,
        request: Request,
        spec: TaskSpec,
        on_attempt: OnAttempt | None = None,
        deadline: float | None = None,
        token: Token | None = None,
        first_token: bool = False,
        first: int = 1,
    ) -> Outcome:
        """Send the request; retry on connect errors, cut-off responses, 5xx and 429 as the policy says.

        `deadline` (time.monotonic()) is when the run's lease ends: no attempt runs past it and
        no backoff wait that would cross it is started; the run fails with the reason instead.
        `token`: the run counts against a rate limit (no jitter then: the limit spreads the requests). Every retry
        takes a token of its own just before it leaves (`token()`: 0 when taken, else the seconds until one may be),
        and so does the first request unless its claim took one for it (`first_token`).
        `first`: the number of the first attempt (a job's retry goes on from the attempts made). A job's request
        (completion = "callback", `request.prepare` given) ends `accepted` at a 2xx, not done.
        """
        key, prepare = request.key, request.prepare
        delay = jitter_seconds(key, spec.policy.jitter_seconds) if token is None and first == 1 else 0
        if delay:
            await self._rest(delay)
        outcome = Outcome("failed")
        for number in range(first, max(first, spec.policy.retries + 1) + 1):  # one at least
            ask = token if number > first or not first_token else None
            attempt = await self._attempt(request, number, deadline, ask)
            outcome.attempts.append(attempt)
            if on_attempt is not None:
                await on_attempt(attempt)
            if attempt.ok:
                outcome.status = "accepted" if prepare is not None else "succeeded"
                break
            if not attempt.transient or number > spec.policy.retries:
                break
            wait = backoff_delay(spec.policy.retry_backoff_seconds, number, attempt.retry_after)
            if deadline is not None and time.monotonic() + wait >= deadline:
                attempt.error = f"{attempt.error}; not retried: waiting {wait:g} s would outlive the run's lease"
                break
            await self._rest(wait)
        return outcome

    async def _attempt(self, request: Request, number: int, deadline: float | None, token: Token | None) -> Attempt:
        """One attempt in a slot. With `token` it leaves only once a token of its rate limits is taken, in the slot,
        just before it is sent; while there is none the slot is given back for the wait."""
        while True:
            async with self.slots:
                held = time.monotonic()
                budget = float("inf") if deadline is None else deadline - held
                wait = await self._ask(token) if token is not None and budget > 0 else 0.0
                if wait <= 0:
                    if budget > 0:
                        attempt = await self.send(request, number, budget)
                    else:
                        attempt = Attempt(
                            number, error="not sent: the run's lease ended while it waited for a free slot"
                        )
                    self.sent += 1
                    self.slot_seconds += time.monotonic() - held
                    return attempt
            if deadline is not None and time.monotonic() + wait >= deadline:
                return Attempt(number, error="not sent: its rate limit had no token for it before the run's lease ends")
            await self._rest(wait)

    @staticmethod
    async def _ask(token: Token) -> float:
        """Take a token of the run's rate limits: 0 when taken, else how long to wait before asking again (at least
        MIN_TOKEN_WAIT; TOKEN_RETRY_SECONDS when the database did not answer: never sent without a token)."""
        try:
            wait = await token()
        except Exception:
            return TOKEN_RETRY_SECONDS
        return 0.0 if wait <= 0 else max(wait, MIN_TOKEN_WAIT)

    async def _rest(self, seconds: float) -> None:
        """A jitter or backoff wait: it holds no slot, and `resting` counts the runs in one."""
        self.resting += 1
        if self.on_rest is not None:
            self.on_rest()
        try:
            await self.sleep(seconds)
        finally:
            self.resting -= 1
