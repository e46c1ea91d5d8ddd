"""OAuth2 client-credentials tokens for targets (`auth.kind = "oauth2_client_credentials"`): one per
(token_url, client, scope, audience), shared by all runs of an engine, refreshed before they expire."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from reconciler.spec.target import HEADER_VALUE, OAuth2ClientCredentials
from reconciler.targets.request import USER_AGENT
from reconciler.targets.secrets import RunSecrets

TOKEN_REFRESH_MARGIN = 30.0
TOKEN_BYTES = 64 * 1024  # a token response larger than this is not a token response


@dataclass
class _Token:
    value: str
    expires_at: float


class TokenError(Exception):
    """The OAuth2 token could not be obtained."""


class TokenCache:
    """OAuth2 client-credentials tokens, one per (token_url, client, scope, audience), shared by all runs."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession]) -> None:
        self.session = session  # the engine's HTTP client (Firer.session)
        self.tokens: dict[tuple[str, ...], _Token] = {}
        self.locks: dict[tuple[str, ...], asyncio.Lock] = {}
        self.requests = 0

    @staticmethod
    def _key(auth: OAuth2ClientCredentials, client_id: str) -> tuple[str, ...]:
        return (auth.token_url, client_id, auth.scope or "", auth.audience or "")

    async def get(self, auth: OAuth2ClientCredentials, secrets: RunSecrets, *, force: bool = False) -> str:
        client_id = secrets.resolve(auth.client_id, "target.auth.client_id")
        key = self._key(auth, client_id)
        lock = self.locks.setdefault(key, asyncio.Lock())
        stale = self.tokens.get(key)
        async with lock:
            token = self.tokens.get(key)
            # `force` refreshes only if nobody refreshed it while we waited for the lock.
            fresh = token and time.monotonic() < token.expires_at - TOKEN_REFRESH_MARGIN
            if not (token and fresh and not (force and token is stale)):
                token = await self._request(auth, client_id, secrets)
                self.tokens[key] = token
        secrets.remember(token.value)
        return token.value

    async def _request(self, auth: OAuth2ClientCredentials, client_id: str, secrets: RunSecrets) -> _Token:
        secret = secrets.resolve(auth.client_secret, "target.auth.client_secret")
        form = {"grant_type": "client_credentials"}
        if auth.scope:
            form["scope"] = auth.scope
        if auth.audience:
            form["audience"] = auth.audience
        self.requests += 1
        session = self.session()
        try:
            headers = {"Authorization": aiohttp.encode_basic_auth(client_id, secret), "User-Agent": USER_AGENT}
            secrets.remember_basic(secret, headers["Authorization"])
            async with session.post(auth.token_url, data=form, headers=headers) as response:
                if response.status != 200:
                    raise TokenError(f"token endpoint {auth.token_url} answered {response.status}")
                body = await response.content.read(TOKEN_BYTES)
        except aiohttp.ClientError as exc:
            raise TokenError(f"token request to {auth.token_url} failed: {type(exc).__name__}") from None
        try:
            parsed = json.loads(body)
            value = str(parsed["access_token"])
            lifetime = float(parsed.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise TokenError(f"token endpoint {auth.token_url} returned no access_token") from None
        if not HEADER_VALUE.fullmatch(value) or not value:
            raise TokenError(
                f"token endpoint {auth.token_url} returned an access_token that cannot be sent in a header"
            )
        lifetime = lifetime if 0 < lifetime < 10 * 365 * 86400 else 3600.0  # NaN, negative, absurd: an hour
        return _Token(value, time.monotonic() + lifetime)
