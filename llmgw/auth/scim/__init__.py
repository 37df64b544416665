"""SCIM 2.0 provisioning at /scim/v2 (RFC 7643, 7644): a provider (Entra ID, Okta) makes, changes,
suspends and removes accounts and pushes groups, whose names give roles and places.

One module per idea: schemas (what the server says of itself), filter
(filters and PATCH paths), patch, users, groups, resources (what they
share), tokens (the provider's bearer token), routes (the aiohttp side).
"""

from llmgw.auth.scim.routes import Scim, ScimPlane, mount
from llmgw.auth.scim.tokens import TokenCheck, make_token, token_made

__all__ = ["Scim", "ScimPlane", "TokenCheck", "make_token", "mount", "token_made"]
