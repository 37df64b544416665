"""The model mirror: one vetted copy of every pinned file, served to the nodes over the cluster's TLS.

    llmgw mirror serve --config /etc/llmgw/mirror.yaml

holdings.py is what it keeps (files, the catalog's wanted pins, removals); fetching.py brings a file in,
checked; service.py is the work (`Mirror`); api.py the listener, process.py the process around it; peers.py a
second mirror kept in step; importing.py files carried in on a disk; client.py what `llmgw mirror`, the control
planes and the bench call it with.
docs/mirror.md is the user's page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.mirror.client import MirrorClient, MirrorUnreachable
    from llmgw.mirror.holdings import FileKey
    from llmgw.mirror.process import serve
    from llmgw.mirror.service import Mirror, MirrorError
    from llmgw.mirror.tls import client_context

__all__ = ["FileKey", "Mirror", "MirrorClient", "MirrorError", "MirrorUnreachable", "client_context", "serve"]

__getattr__ = lazy_face(__name__, {
    "client": ["MirrorClient", "MirrorUnreachable"],
    "holdings": ["FileKey"],
    "process": ["serve"],
    "service": ["Mirror", "MirrorError"],
    "tls": ["client_context"],
})
