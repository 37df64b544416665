"""SCIM's errors: RFC 7644 3.12's shape, the status as a string, and a scimType where one fits.

The detail is one English sentence that says what to send instead: a
provisioning client (Entra ID, Okta) shows it to whoever reads its log.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from aiohttp import web

from llmgw.errors import ExpectedError

ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
CONTENT_TYPE = "application/scim+json"


class ScimError(ExpectedError):
    """A refusal in SCIM's shape: HTTP `status`, and `scim_type` (uniqueness, invalidFilter, …) where RFC 7644
    names one."""

    def __init__(self, status: int, message: str, *, scim_type: str | None = None,
                 params: Mapping[str, object] | None = None):
        super().__init__(message, params=params)
        self.status = status
        self.scim_type = scim_type


def scim_json(data: object, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type=CONTENT_TYPE, headers=headers)


def error_response(error: ScimError) -> web.Response:
    body: dict[str, object] = {"schemas": [ERROR], "status": str(error.status), "detail": str(error)}
    if error.scim_type:
        body["scimType"] = error.scim_type
    return scim_json(body, error.status)
