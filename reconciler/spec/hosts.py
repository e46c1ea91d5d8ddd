"""Hosts a client can reach: a name, an IPv4 address or a bracketed IPv6 address, and an optional port.

Task URLs (models) and --metrics-addr (cli) share these checks; this module needs no pydantic,
so the CLI can parse its options without loading the task models.
"""

from __future__ import annotations

import ipaddress
import re

HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(?::([0-9]*))?")  # an IPv6 host in brackets
HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def host_problem(host: str) -> str | None:
    """Why `host` (as written in a URL or HOST:PORT, IPv6 in brackets) is not a host a client can reach, or None."""
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"{host} is not a valid IPv6 address"
        return None
    if not host.isascii():
        # Decision: no IDNA here; clients disagree (IDNA 2003 vs 2008), the punycode form is unambiguous.
        try:
            hint = f" ({host.encode('idna').decode('ascii')})"
        except UnicodeError:
            hint = ""
        return f"host {host!r} is not ASCII; write its punycode form{hint}"
    labels = host.lower().removesuffix(".").split(".")
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host.removesuffix("."))
        except ValueError:
            return f"{host!r} is not a valid IPv4 address"
        return None
    if len(host) > 253 or not all(HOST_LABEL.fullmatch(label) for label in labels):
        return f"{host!r} is not a valid host name"
    return None


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
