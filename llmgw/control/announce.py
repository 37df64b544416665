"""The line a control plane prints once it is up: addresses a person can paste.

It printed advertise(), the host name when bound to every interface
(http://vm:8080), while build.py printed 127.0.0.1; on a machine whose name
does not resolve the first fails, so the newcomer had two addresses and one
that did not work (issue 11). The address for a client on this machine comes
first; the one other machines use is a second line when it differs.
"""

from __future__ import annotations


def local_url(host: str, port: int) -> str:
    """The client API's base URL for a client on this machine, given the address it is bound to."""
    if host in ("0.0.0.0", ""):  # noqa: S104 - read, not bound
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def announcement(name: str, bound: tuple[str, int], advertised: str, admin: str | None) -> str:
    """`llmgw server NAME is up: …`, and where other machines reach it when that is another address."""
    here = local_url(*bound)
    lines = [f"llmgw server {name} is up: client API {here}/v1, admin API {admin}"]
    if advertised.rstrip("/") != here:
        lines.append(f"  from other machines: {advertised.rstrip('/')}/v1")
    return "\n".join(lines)
