"""Secret-looking values masked for display: plans, status, explain, runs, export, errors.

Validation keeps secrets out of task files (docs/files.md, "Headers and query parameters"), but a
database written by an older version, or edited by hand, may still hold one; every rendering
passes what it shows through here. A value is secret-looking when its key is a credential
name (models.is_credential_name), or when it is the password of a URL or DSN.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from reconciler.spec.target import is_credential_name

MASK = "***"
# An http(s) URL in free text: masked as a whole by mask_url (userinfo, query, fragment).
_URL = re.compile(r"https?://[^\s'\"<>]+", re.I)
# scheme://user:password@host — in free text (error messages, old rows).
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
# key=value (or key: value) pairs of a DSN, query string or log line whose key is a credential name.
_PAIR = re.compile(
    r"(?P<key>[A-Za-z_][\w.-]*)(?P<eq>\s*=\s*|:\s+)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;,#]+)"
)
# An HTTP credential written out: `Bearer abc`, `Basic dXNlcjpw`, `Token abc`.
_SCHEME_CREDENTIAL = re.compile(r"\b(?P<scheme>Bearer|Basic|Token|Digest)\s+[A-Za-z0-9._~+/=-]{4,}", re.I)


def mask_url(url: str) -> str:
    """The URL with its userinfo and every credential-named query value replaced by ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    return urlunsplit((parts.scheme, netloc, parts.path, _mask_pairs(parts.query), _mask_pairs(parts.fragment)))


def _mask_pairs(text: str) -> str:
    """A query string (or a fragment written like one, `#access_token=…`) with credential values masked."""
    pairs = parse_qsl(text, keep_blank_values=True)
    if not any(is_credential_name(k) for k, _ in pairs):
        return text
    return "&".join(f"{quote(k, safe='')}={MASK if is_credential_name(k) else quote(v, safe='')}" for k, v in pairs)


def mask_text(text: str) -> str:
    """Free text with URL userinfo and `secret=value` pairs masked."""
    text = _URL.sub(lambda m: mask_url(m[0]), text)
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m['scheme']} {MASK}", text)
    return _PAIR.sub(lambda m: f"{m['key']}{m['eq']}{MASK}" if is_credential_name(m["key"]) else m[0], text)


def mask_value(key: str, value: Any) -> Any:
    """One value found under `key` (the last segment of its path)."""
    if isinstance(value, dict):
        return mask_spec(value)
    if isinstance(value, list):
        return [mask_value(key, item) for item in value]
    if not isinstance(value, str):
        return value
    if key == "url" or key.endswith("_url"):
        return mask_url(value)
    return MASK if is_credential_name(key) else mask_text(value)


def mask_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a (stored or desired) spec with every secret-looking literal masked; `{ env = NAME }`
    references are names, not secrets, and stay."""
    return {key: mask_value(key, value) for key, value in spec.items()}


def mask_path(path: str, value: Any) -> Any:
    """A value at a dotted path of a flattened spec (a plan's field diff)."""
    return mask_value(path.rpartition(".")[2], value)


def masked_job(row: Mapping[str, Any]) -> dict[str, Any]:
    """A run with what its job reported (progress, output; docs/jobs.md) masked: credential-named keys, secret-looking
    text."""
    return {**row, **{key: mask_value(key, row[key]) for key in ("progress", "output") if row.get(key) is not None}}
