"""Taking a control plane's ports, before anything else.

The ports are bound first, before the store is opened or the lease asked
for: a second `llmgw server` started by mistake on the same machine must
fail at once with a sentence, not join the race for leadership and take
over as a confused twin of the first.
"""

from __future__ import annotations

import errno
import socket
import ssl

from aiohttp import web

from llmgw.config import Address
from llmgw.errors import ExpectedError

# The kernel's queue of connections dealt to a socket and not yet taken by a process.
# aiohttp's site listens again with its own default of 128 unless given this.
LISTEN_BACKLOG = 1024


class ListenError(ExpectedError):
    pass


def bind(role: str, address: Address, *, shared: bool = False) -> socket.socket:
    """A listening TCP socket for `address` (":8080", "127.0.0.1:9090", "[::1]:0").

    `shared` is for the client port served by several worker processes: the
    socket is bound exactly as an unshared one is, so a port anybody holds
    (another llmgw server, with or without workers) fails here with the same
    sentence, and only then marked SO_REUSEPORT, before it listens, so that
    `share_port` can open this process's other sockets on the same port.
    Binding with SO_REUSEPORT from the start would let a second server with
    workers join the first one's port instead of being refused.
    """
    host = address.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = "0.0.0.0" if host in ("", "0.0.0.0") else host  # noqa: S104 - the operator's listen address
    sock = socket.socket(family, socket.SOCK_STREAM)
    # SO_REUSEADDR only lets a restart reuse a port in TIME_WAIT; it does
    # not let two live servers share one (that would be SO_REUSEPORT).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind_host, address.port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ListenError(
                f"the {role} port {address} is taken by another process; is another llmgw server "
                f"running on this machine? (ss -ltnp 'sport = :{address.port}' shows which)"
            ) from None
        if e.errno == errno.EACCES:
            raise ListenError(
                f"the {role} port {address} needs privileges this process lacks; use a port above 1023"
            ) from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ListenError(f"the {role} address {address} is not an address of this machine") from None
        raise ListenError(f"cannot listen on {address} for the {role} API: {e.strerror}") from None
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def share_port(first: socket.socket, role: str) -> socket.socket:
    """Another listening socket on the port of `first` (made by `bind(..., shared=True)`).

    The kernel spreads new connections over every socket of the group, one
    accept queue each, which is what lets each worker process accept on its
    own instead of all of them waking for every connection on one socket.
    """
    host, port = first.getsockname()[:2]
    sock = socket.socket(first.family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ListenError(f"cannot open another socket on the {role} port {port} for the workers: "
                          f"{e.strerror}; run with workers: 1") from None
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def shown(sock: socket.socket) -> str:
    """The address a socket really listens on (port 0 becomes the port given)."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def client_site(runner: web.AppRunner, sock: socket.socket, *, backlog: int,
                ssl_context: ssl.SSLContext | None = None) -> web.SockSite:
    """The site for `sock`: through the app's connection guard when it has one (the client app does).

    The main process and every worker make their client sites here, so a slow
    or idle client is held to the same limits whichever process accepted it.
    """
    from llmgw.router import CONNECTIONS, GuardedSite

    guard = runner.app.get(CONNECTIONS)
    if guard is None:
        return web.SockSite(runner, sock, ssl_context=ssl_context, backlog=backlog)
    return GuardedSite(runner, sock, guard, ssl_context=ssl_context, backlog=backlog)
