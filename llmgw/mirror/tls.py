"""The mirror's certificates: the one it serves with, and the one it (and `llmgw mirror` beside it) dials with.

Both are this machine's control plane's certificate unless mirror.yaml's `tls` names others: it is signed by the
cluster CA, names every address of the machine (so a node checks it is talking to the machine it meant to), and
is good for both ends of a connection.
"""

from __future__ import annotations

import os
import ssl

from llmgw.config import MirrorConfig
from llmgw.errors import ExpectedError


class MirrorTlsError(ExpectedError):
    pass


def _files(cfg: MirrorConfig) -> tuple[str, str, str]:
    cert, key, ca = cfg.tls_files()
    for what, path in (("certificate", cert), ("key", key), ("CA certificate", ca)):
        if not os.path.exists(path):
            raise MirrorTlsError(
                f"the mirror has no {what} at {path}: run it on a control plane's machine (its certificate is in "
                f"{os.path.join(cfg.data_dir, 'tls')} once `llmgw server` has started there), or name the files in "
                "mirror.yaml's tls")
    return cert, key, ca


def _load(ctx: ssl.SSLContext, cfg: MirrorConfig) -> ssl.SSLContext:
    cert, key, ca = _files(cfg)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(cafile=ca)
    except PermissionError as e:
        raise MirrorTlsError(f"cannot read {e.filename}: permission denied; run the mirror (and `llmgw mirror`) as "
                             "the user the control plane runs as, or as root") from None
    except ssl.SSLError as e:
        raise MirrorTlsError(f"the mirror's certificate files ({cert}, {key}, {ca}) do not go together "
                             f"({e.reason})") from None
    return ctx


def server_context(cfg: MirrorConfig) -> ssl.SSLContext:
    """Serve with this machine's certificate; every client must show one from the cluster CA."""
    ctx = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cfg)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(cfg: MirrorConfig) -> ssl.SSLContext:
    """Dial a peer (or this machine's mirror) with this machine's certificate, trusting the cluster CA only."""
    return _load(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cfg)
