"""The client API's own resources (files, batches, knowledge bases): a handler's refusals as OpenAI's error object.

A handler takes the request, the plane and the key's principal, and raises
Refuse for what the client sent wrong; a store that does not answer is 503
with when to try again, in a sentence naming what cannot be reached now.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from llmgw.account import Principal
from llmgw.router.appkeys import PLANE, PRINCIPAL
from llmgw.router.call import Refuse
from llmgw.router.errors import api_error
from llmgw.router.plane import ClientPlane
from llmgw.store import StoreError

log = logging.getLogger("llmgw.router")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
KeyHandler = Callable[[web.Request, ClientPlane, Principal], Awaitable[web.StreamResponse]]


def refusing(unavailable: str) -> Callable[[KeyHandler], Handler]:
    """A decorator: Refuse as its error object, StoreError as 503 saying `unavailable` cannot be reached."""
    def wrap(handler: KeyHandler) -> Handler:
        @functools.wraps(handler)
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request, request.app[PLANE], request[PRINCIPAL])
            except Refuse as refused:
                return api_error(refused.status, refused.message, refused.code, param=refused.param,
                                 headers=refused.headers)
            except StoreError as e:
                log.warning("%s %s: the store did not answer: %s", request.method, request.path, e)
                return api_error(503, f"{unavailable} cannot be read or written right now; try again in a few "
                                      "seconds", "store_unavailable", headers={"Retry-After": "5"})
        return handle
    return wrap
