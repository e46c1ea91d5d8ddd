"""A run's `{ env = NAME }` values: resolved at fire time under the policy, and scrubbed from
everything stored or logged for the run.

A target may echo a secret in any form it received or re-encoded it in: raw, percent-encoded
(`quote`, `quote_plus`, or as the request carried it: yarl keeps `/` and encodes `+ =` in a query
value), each character JSON- or HTML-escaped (`\\u0027`, `\\/`, `&#x27;`, `&#39;`, `&quot;`), and
any of them upper- or lower-cased (`%2b`, a page that shouts). One case-insensitive pattern per set
of secrets matches them all; it is compiled once and shared by every run with the same secrets.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
from urllib.parse import quote, quote_plus

from reconciler.spec.environment import EnvPolicy
from reconciler.spec.values import EnvRef

REDACTED = "[redacted]"


# Shorter values cannot be secrets worth the name, and replacing them would garble every excerpt.
MIN_SCRUB_LENGTH = 4
_HTML = {
    "&": ("&amp;", "&#38;", "&#x26;"),
    "<": ("&lt;", "&#60;", "&#x3c;"),
    ">": ("&gt;", "&#62;", "&#x3e;"),
    '"': ("&quot;", "&#34;", "&#x22;"),
    "'": ("&#x27;", "&#39;", "&apos;"),
}
_JSON = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class EnvProblem(Exception):
    """A `{ env = NAME }` value that cannot be used for this run; the run fails, the engine does not."""


def _json_escapes(ch: str) -> set[str]:
    """`ch` as JSON encoders write it: short escapes, and `\\uXXXX` (a surrogate pair beyond the BMP)."""
    code = ord(ch)
    if code > 0xFFFF:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escapes = {f"\\u{high:04x}\\u{low:04x}"}
    else:
        escapes = {f"\\u{code:04x}"}
    if ch in _JSON:
        escapes.add(_JSON[ch])
    return escapes


def _html_escapes(text: str) -> set[str]:
    """`text` with its HTML-special characters escaped in every way (named, decimal, hex), in every combination."""
    return {"".join(chars) for chars in itertools.product(*((ch, *_HTML.get(ch, ())) for ch in text))}


@functools.lru_cache(maxsize=1024)
def _char_pattern(ch: str) -> tuple[str, int]:
    """A pattern for one character of a secret: itself, JSON-escaped or HTML-escaped (an XML character reference
    beyond ASCII), in either order; and the most bytes it can match (any letter in another case: up to 4)."""
    if ch.isascii() and ch.isalnum():  # nearly every character: no escape to consider
        return ch, 3  # `k` matches the Kelvin sign, 3 bytes
    forms = {escaped for form in (ch, *_json_escapes(ch)) for escaped in _html_escapes(form)}
    if not ch.isascii():
        forms |= {f"&#{ord(ch)};", f"&#x{ord(ch):x};"}
    ordered = sorted(forms, key=len, reverse=True)
    return "(?:" + "|".join(map(re.escape, ordered)) + ")", max(4, len(ordered[0]))


def _quoted(value: str, safe: str, plus: bool = False) -> str:
    """`value` percent-encoded as UTF-8; a variable's undecodable bytes (surrogate-escaped by os.environ) as such."""
    encode = quote_plus if plus else quote
    try:
        return encode(value, safe=safe, errors="surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no environment decodes to: any form will do, just no crash
        return encode(value, safe=safe, errors="surrogatepass")


def variants(value: str) -> set[str]:
    """The forms a value takes when a target echoes it back, before escaping and case: raw, URL-encoded (with `/`
    kept or not, spaces as `+` or not), and upper- or lower-cased where a case-insensitive match would not find
    that (`ß` upper-cased is `SS`)."""
    found = {value, _quoted(value, ""), _quoted(value, "/"), _quoted(value, "", plus=True)}
    for cased in (value.upper(), value.lower()):
        if not re.fullmatch(re.escape(value), cased, re.IGNORECASE):
            found.add(cased)
    return found


@functools.lru_cache(maxsize=4096)  # the same secrets in run after run: compiled once
def secrets_pattern(values: frozenset[str]) -> tuple[re.Pattern[str], int]:
    """One case-insensitive pattern for every form of `values`, longest first (a secret holding another wins),
    and the most bytes a match can span."""
    forms = sorted({form for value in values for form in variants(value)}, key=lambda form: (-len(form), form))
    chars = [[_char_pattern(ch) for ch in form] for form in forms]
    pattern = re.compile("|".join("".join(part for part, _ in form) for form in chars), re.IGNORECASE)
    return pattern, max(sum(width for _, width in form) for form in chars)


class RunSecrets:
    """Resolves one run's `{ env = NAME }` values and scrubs them (and issued tokens) from text."""

    def __init__(self, env: Mapping[str, str], policy: EnvPolicy) -> None:
        self.env = env
        self.policy = policy
        self.values: set[str] = set()  # the secrets, and each form a request carried one in
        self._compiled: tuple[re.Pattern[str], int] | None = None

    def resolve(self, value: str | EnvRef, key: str) -> str:
        """A literal, or the allowed, set environment variable's value (remembered for scrubbing)."""
        if isinstance(value, str):
            return value
        name = value.env
        if not self.policy.allows(name):
            raise EnvProblem(f"{key} names environment variable {name}: {self.policy.describe()}")
        found = self.env.get(name)
        if found is None:
            raise EnvProblem(
                f"environment variable {name} is not set (needed by {key}); set it in the engine's environment"
            )
        self.remember(found)
        return found

    def remember(self, *secrets: str) -> None:
        """Treat these values as secret for the rest of the run."""
        for secret in secrets:
            if len(secret) >= MIN_SCRUB_LENGTH and secret not in self.values:
                self.values.add(secret)
                self._compiled = None

    def remember_sent(self, value: str, sent: str) -> None:
        """`sent` is how the request built carried `value` (a query value as yarl encoded it): secret if `value` is."""
        if value in self.values:
            self.remember(sent)

    def remember_basic(self, password: str, header: str) -> None:
        """Basic credentials travel base64-encoded: the built `Authorization` header's credentials are secret too."""
        self.remember(password, header.partition(" ")[2])

    def _compile(self) -> tuple[re.Pattern[str], int] | None:
        """The pattern of every form of every remembered value and its widest match, or None (most runs)."""
        if self._compiled is None and self.values:
            self._compiled = secrets_pattern(frozenset(self.values))
        return self._compiled

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """Every form of every remembered value, or None when there is none (most runs)."""
        compiled = self._compile()
        return compiled[0] if compiled else None

    def scrub(self, text: str | None) -> str | None:
        """`text` with every remembered value, in any form, replaced by [redacted]."""
        if not text:
            return text
        pattern = self.pattern
        return pattern.sub(REDACTED, text) if pattern is not None else text

    def excerpt(self, raw: bytes, limit: int) -> str:
        """At most `limit` bytes of text from the start of a response body, scrubbed. A value that begins within
        the limit is redacted whole; nothing after the limit shows, even where redacting shortened the text."""
        text = raw.decode("utf-8", "replace")
        pattern = self.pattern
        if pattern is not None:
            cut = len(text.encode()[:limit].decode("utf-8", "ignore"))  # characters within `limit` bytes
            parts, at = [], 0
            for match in pattern.finditer(text):
                if match.start() >= cut:
                    break
                parts += [text[at : match.start()], REDACTED]
                at = match.end()
            text = "".join(parts) + text[at:cut]
        return text.encode()[:limit].decode("utf-8", "ignore")

    @property
    def longest(self) -> int:
        """Bytes an echo of the longest remembered value can take (the excerpt reads this much extra, so one cut
        at its end is still recognized and redacted)."""
        compiled = self._compile()
        return compiled[1] if compiled else 0  # most runs: no secret at all


def storable(text: str | None) -> str | None:
    """Text PostgreSQL can store: NUL replaced (invalid UTF-8 was replaced when decoding)."""
    return text.replace("\x00", "\ufffd") if text else text
