"""Names under which the client app keeps the process serving it and each request's facts."""

from aiohttp import web

from llmgw.router.plane import ClientPlane

# Subscripted rather than AppKey("plane", ClientPlane): aiohttp takes a type there only when it is a concrete
# class, and a Protocol is not one.
PLANE = web.AppKey[ClientPlane]("plane")
PRINCIPAL = "llmgw.principal"  # the key's Principal, set by the authenticating middleware
REQUEST_ID = "llmgw.request_id"  # set first, so every answer, refusals included, carries it
