"""A store's address read as text: its hosts, and the form shown in messages.

A PostgreSQL address may list several hosts, as libpq's do
(`postgresql://llmgw:pw@10.0.0.6:5432,10.0.0.7:5432/llmgw?target_session_attrs=read-write`),
for a store under Patroni: asyncpg tries them in order and keeps the first
that matches `target_session_attrs`. urllib's urlsplit cannot read such an
address (its port is "5432,10.0.0.7:5432"), so it is taken apart here by
hand. It lives in config, the bottom floor, because server.yaml's checks read
it as well as the store; the store imports it from here.
"""

from __future__ import annotations

from urllib.parse import parse_qs

SCHEMES = ("postgresql://", "postgres://")
# What a client with several hosts must ask for: only a primary takes writes,
# and without one of these asyncpg would settle on whichever host answers first.
WRITABLE = ("read-write", "primary")


def _split(url: str) -> tuple[str, str, str, str]:
    """(scheme://, user info with its @ or "", the hosts, the rest from the path on)."""
    scheme = next(s for s in SCHEMES if url.startswith(s))
    rest = url[len(scheme):]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    at = netloc.rfind("@")
    return scheme, netloc[: at + 1], netloc[at + 1:], tail


def redact_url(url: str) -> str:
    """The store's address with any password taken out, for messages and logs."""
    if not url.startswith(SCHEMES):
        return url
    scheme, userinfo, hosts, tail = _split(url)
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***@"
    # A password can also ride in the query (?password=…); it never reaches a message.
    if "password=" in tail:
        path, _, query = tail.partition("?")
        kept = [p if not p.startswith("password=") else "password=***" for p in query.split("&")]
        tail = path + "?" + "&".join(kept)
    return scheme + userinfo + hosts + tail


def postgres_hosts(url: str) -> list[str]:
    """The hosts of a PostgreSQL address as written (`host:port` or `host`), in the order tried."""
    if not url.startswith(SCHEMES):
        return []
    return [h for h in _split(url)[2].split(",") if h]


def session_attrs(url: str) -> str:
    """The address's target_session_attrs, "" when it names none."""
    if not url.startswith(SCHEMES):
        return ""
    query = _split(url)[3].partition("?")[2]
    return (parse_qs(query).get("target_session_attrs") or [""])[-1]


def several_hosts_problem(url: str) -> str | None:
    """Why an address with several hosts would not find the primary; None when it would (or has one host)."""
    if len(postgres_hosts(url)) < 2:
        return None
    attrs = session_attrs(url)
    if attrs in WRITABLE:
        return None
    said = f"target_session_attrs={attrs}" if attrs else "no target_session_attrs"
    return (f"with several hosts the address needs ?target_session_attrs=read-write, so that llmgw "
            f"writes only to the primary; it has {said}")
