"""Names under which the client app keeps the control plane and each request's facts."""

from aiohttp import web

PLANE = web.AppKey("plane", object)
PRINCIPAL = "llmgw.principal"  # the key's Principal, set by the authenticating middleware
REQUEST_ID = "llmgw.request_id"  # set first, so every answer, refusals included, carries it
