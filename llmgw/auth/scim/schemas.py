"""What this server says of itself: /ServiceProviderConfig, /ResourceTypes and /Schemas (RFC 7643 5-7).

Each claim here is one the code keeps: PATCH and filtering are supported
(every attribute can be filtered on, filter.py), bulk, sort, ETags and
password changes are not. Users carry the core schema's attributes a
directory sends; `emails` and `active` are marked required because an
account needs an e-mail and a state, though a userName that is an e-mail
and a missing `active` (true) are taken as well.
"""

from __future__ import annotations

from typing import Any

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
SEARCH = "urn:ietf:params:scim:api:messages:2.0:SearchRequest"
SPC = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"
RESOURCE_TYPE = "urn:ietf:params:scim:schemas:core:2.0:ResourceType"
SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Schema"
CORE = (USER, GROUP)
MAX_RESULTS = 200  # a page's most resources; a provider pages with startIndex


def _a(name: str, type_: str = "string", *, multi: bool = False, required: bool = False,
       mutability: str = "readWrite", returned: str = "default", uniqueness: str = "none",
       case_exact: bool = False, sub: list[dict[str, Any]] | None = None, refs: list[str] | None = None,
       canonical: list[str] | None = None, description: str = "") -> dict[str, Any]:
    attr: dict[str, Any] = {"name": name, "type": type_, "multiValued": multi, "description": description or name,
                            "required": required, "caseExact": case_exact, "mutability": mutability,
                            "returned": returned, "uniqueness": uniqueness}
    if sub is not None:
        attr["subAttributes"] = sub
    if refs is not None:
        attr["referenceTypes"] = refs
    if canonical is not None:
        attr["canonicalValues"] = canonical
    return attr


_USER_ATTRS = [
    _a("userName", required=True, uniqueness="server",
       description="The provider's unique name for the person; their e-mail when no emails are sent."),
    _a("name", "complex", description="The person's name; formatted, else given and family, is the account's name.",
       sub=[_a(n) for n in ("formatted", "familyName", "givenName", "middleName", "honorificPrefix",
                             "honorificSuffix")]),
    _a("displayName", description="The account's name when name.formatted is not sent."),
    _a("nickName"),
    _a("title"),
    _a("preferredLanguage"),
    _a("emails", "complex", multi=True, required=True,
       description="The primary (else the first) is the account's e-mail; a userName that is an e-mail will do.",
       sub=[_a("value", required=True), _a("type", canonical=["work", "home", "other"]), _a("primary", "boolean")]),
    _a("active", "boolean", required=True,
       description="false suspends the account (its sessions end, its keys are refused); true lifts that."),
]

_GROUP_ATTRS = [
    _a("displayName", required=True, uniqueness="server",
       description="What auth.scim.roles and auth.scim.memberships name."),
    _a("members", "complex", multi=True, description="The users in the group.",
       sub=[_a("value", mutability="immutable", case_exact=True),
            _a("$ref", "reference", mutability="immutable", case_exact=True, refs=["User"])]),
]

_SPC_ATTRS = [
    _a("documentationUri", "reference", mutability="readOnly", refs=["external"]),
    *[_a(n, "complex", required=True, mutability="readOnly", sub=[_a("supported", "boolean", required=True,
                                                                       mutability="readOnly")])
      for n in ("patch", "changePassword", "sort", "etag")],
    _a("bulk", "complex", required=True, mutability="readOnly",
       sub=[_a("supported", "boolean", required=True, mutability="readOnly"),
            _a("maxOperations", "integer", required=True, mutability="readOnly"),
            _a("maxPayloadSize", "integer", required=True, mutability="readOnly")]),
    _a("filter", "complex", required=True, mutability="readOnly",
       sub=[_a("supported", "boolean", required=True, mutability="readOnly"),
            _a("maxResults", "integer", required=True, mutability="readOnly")]),
    _a("authenticationSchemes", "complex", multi=True, required=True, mutability="readOnly",
       sub=[_a(n, required=n in ("type", "name", "description"), mutability="readOnly")
            for n in ("type", "name", "description")]
       + [_a("primary", "boolean", mutability="readOnly")]),
]

_RESOURCE_TYPE_ATTRS = [
    _a("id", mutability="readOnly"),
    _a("name", required=True, mutability="readOnly"),
    _a("description", mutability="readOnly"),
    _a("endpoint", "reference", required=True, mutability="readOnly", refs=["uri"]),
    _a("schema", "reference", required=True, mutability="readOnly", case_exact=True, refs=["uri"]),
    _a("schemaExtensions", "complex", multi=True, mutability="readOnly",
       sub=[_a("schema", "reference", required=True, mutability="readOnly", case_exact=True, refs=["uri"]),
            _a("required", "boolean", required=True, mutability="readOnly")]),
]

_ATTRIBUTE_SUBS = [
    _a("name", required=True, mutability="readOnly", case_exact=True),
    _a("type", required=True, mutability="readOnly",
       canonical=["string", "complex", "boolean", "decimal", "integer", "dateTime", "reference", "binary"]),
    _a("multiValued", "boolean", required=True, mutability="readOnly"),
    _a("description", mutability="readOnly"),
    _a("required", "boolean", mutability="readOnly"),
    _a("canonicalValues", multi=True, mutability="readOnly"),
    _a("caseExact", "boolean", mutability="readOnly"),
    _a("mutability", mutability="readOnly"),
    _a("returned", mutability="readOnly"),
    _a("uniqueness", mutability="readOnly"),
    _a("referenceTypes", multi=True, mutability="readOnly"),
]

_SCHEMA_ATTRS = [
    _a("id", required=True, mutability="readOnly"),
    _a("name", mutability="readOnly"),
    _a("description", mutability="readOnly"),
    _a("attributes", "complex", multi=True, required=True, mutability="readOnly",
       sub=[*_ATTRIBUTE_SUBS, _a("subAttributes", "complex", multi=True, mutability="readOnly",
                                 sub=_ATTRIBUTE_SUBS)]),
]

_SCHEMAS: dict[str, tuple[str, str, list[dict[str, Any]]]] = {
    USER: ("User", "User Account", _USER_ATTRS),
    GROUP: ("Group", "Group", _GROUP_ATTRS),
    SPC: ("ServiceProviderConfig", "Service Provider Configuration", _SPC_ATTRS),
    RESOURCE_TYPE: ("ResourceType", "Resource Type", _RESOURCE_TYPE_ATTRS),
    SCHEMA: ("Schema", "Schema definition", _SCHEMA_ATTRS),
}


def schema(urn: str, base: str) -> dict[str, Any] | None:
    if urn not in _SCHEMAS:
        return None
    name, description, attributes = _SCHEMAS[urn]
    return {"schemas": [SCHEMA], "id": urn, "name": name, "description": description, "attributes": attributes,
            "meta": {"resourceType": "Schema", "location": f"{base}/Schemas/{urn}"}}


def schemas(base: str) -> list[dict[str, Any]]:
    return [s for urn in _SCHEMAS if (s := schema(urn, base)) is not None]


_RESOURCE_TYPES = {"User": ("/Users", USER, "A person with an account"),
                   "Group": ("/Groups", GROUP, "A group whose name the role and place maps name")}


def resource_type(name: str, base: str) -> dict[str, Any] | None:
    if name not in _RESOURCE_TYPES:
        return None
    endpoint, urn, description = _RESOURCE_TYPES[name]
    return {"schemas": [RESOURCE_TYPE], "id": name, "name": name, "description": description,
            "endpoint": endpoint, "schema": urn,
            "meta": {"resourceType": "ResourceType", "location": f"{base}/ResourceTypes/{name}"}}


def resource_types(base: str) -> list[dict[str, Any]]:
    return [t for name in _RESOURCE_TYPES if (t := resource_type(name, base)) is not None]


def service_provider_config(base: str) -> dict[str, Any]:
    return {
        "schemas": [SPC],
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": False},
        "sort": {"supported": False},
        "etag": {"supported": False},
        "authenticationSchemes": [{
            "type": "oauthbearertoken", "name": "Bearer token", "primary": True,
            "description": "The token llmgw ctl auth scim-token makes (or auth.scim.token_file), sent as "
                           "Authorization: Bearer"}],
        "meta": {"resourceType": "ServiceProviderConfig", "location": f"{base}/ServiceProviderConfig"},
    }


def list_response(resources: list[dict[str, Any]], total: int, start: int) -> dict[str, Any]:
    return {"schemas": [LIST], "totalResults": total, "startIndex": start, "itemsPerPage": len(resources),
            "Resources": resources}
