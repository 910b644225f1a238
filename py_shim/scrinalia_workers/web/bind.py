"""Where the web view listens, and which Host names it answers to.

It binds to the loopback by default; any other address shows the ledger to whoever
reaches it, so it needs --public (compose passes it inside its container, whose port
it publishes on the host's loopback only). The Host check keeps a page from being
read through a name that resolves to us by a trick (DNS rebinding): only the loopback
names, the bound address and the --allow-host names are answered.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from scrinalia_workers.errors import UsageError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve anywhere
            return False

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}/"


def parse_bind(text: str) -> Bind:
    """HOST:PORT ([::1]:8080 for an IPv6 address); port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--bind {text!r} is not HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"--bind {text!r}: an IPv6 address goes in brackets, e.g. [::1]:8080")
    if not host or any(c.isspace() for c in host):
        raise UsageError(f"--bind {text!r} has no host")
    return Bind(host, int(port))


def refuse_exposure(bind: Bind, public: bool) -> str | None:
    """None on the loopback; a warning when --public says so; else UsageError."""
    if bind.loopback:
        return None
    if not public:
        raise UsageError(
            f"--bind {bind.host} listens beyond this host: anyone who reaches it reads the ledger; "
            "pass --public to mean it (behind your own access control)"
        )
    return f"listening on {bind.host}, beyond this host (--public): put access control in front of it"


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request's Host header names us (its port is not checked: a published
    port may differ from the bound one)."""
    if not header:
        return False
    name = header.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name in allowed
