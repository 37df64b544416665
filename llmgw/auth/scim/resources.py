"""What users and groups share: reading a request's JSON, booleans as providers send them, the
`attributes`/`excludedAttributes` projection, paging, and meta's timestamps."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from llmgw.auth.scim.errors import ScimError
from llmgw.auth.scim.filter import Node, parse_filter
from llmgw.auth.scim.schemas import MAX_RESULTS
from llmgw.errors import N_

MAX_BODY = 1024 * 1024  # a group's PATCH of a thousand members is far less
_ALWAYS = {"id", "schemas"}  # returned whatever `attributes` says (RFC 7643 7: returned "always")


def when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def boolean(value: Any, attribute: str) -> bool:
    """A SCIM boolean; Entra ID sends "True"/"False" strings in PATCH."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ScimError(400, N_("{attribute} is true or false, not {value}"), scim_type="invalidValue",
                    params={"attribute": attribute, "value": str(value)[:50]})


async def read_json(request: web.Request) -> Any:
    """The request's JSON, its size bounded; 413 or 400 invalidSyntax in SCIM's shape otherwise."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise ScimError(413, N_("a SCIM request's body is at most {most} bytes"), params={"most": MAX_BODY})
    body = bytearray()
    async for chunk in request.content.iter_chunked(65536):
        body += chunk
        if len(body) > MAX_BODY:
            raise ScimError(413, N_("a SCIM request's body is at most {most} bytes"), params={"most": MAX_BODY})
    try:
        return orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        raise ScimError(400, N_("the request's body is not JSON"), scim_type="invalidSyntax") from None


def resource_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ScimError(400, N_("a resource is a JSON object"), scim_type="invalidSyntax")
    return body


def _names(text: Any) -> list[str]:
    if isinstance(text, list):
        text = ",".join(str(t) for t in text)
    if not isinstance(text, str):
        return []
    out = []
    for part in text.split(","):
        part = part.strip()
        if part.lower().startswith("urn:ietf:params:scim:schemas:core:2.0:"):
            part = part.rsplit(":", 1)[-1]
        if part:
            out.append(part)
    return out


@dataclass(frozen=True)
class Query:
    """A list's or a read's parameters, from the URL or a /.search body."""

    where: Node | None = None
    start: int = 1
    count: int = MAX_RESULTS
    attributes: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()

    @classmethod
    def of(cls, params: Any) -> Query:
        def number(name: str, default: int) -> int:
            raw = params.get(name)
            if raw is None or raw == "":
                return default
            try:
                return int(raw)
            except (TypeError, ValueError):
                raise ScimError(400, N_("{name} is a whole number, not {value}"), scim_type="invalidValue",
                                params={"name": name, "value": str(raw)[:50]}) from None

        text = params.get("filter")
        if text is not None and not isinstance(text, str):
            raise ScimError(400, N_("filter is a string"), scim_type="invalidFilter")
        return cls(where=parse_filter(text) if text else None,
                   start=max(1, number("startIndex", 1)),
                   count=min(MAX_RESULTS, max(0, number("count", MAX_RESULTS))),
                   attributes=tuple(_names(params.get("attributes"))),
                   excluded=tuple(_names(params.get("excludedAttributes"))))

    def wants(self, name: str) -> bool:
        """Whether a top-level attribute is to be returned (so a costly one, a group's members, can be skipped)."""
        folded = name.casefold()
        if self.attributes:
            return any(a.split(".")[0].casefold() == folded for a in self.attributes)
        return not any(e.casefold() == folded for e in self.excluded)

    def project(self, resource: dict[str, Any]) -> dict[str, Any]:
        if self.attributes:
            out: dict[str, Any] = {}
            for key, value in resource.items():
                if key in _ALWAYS:
                    out[key] = value
                    continue
                subs = [a.split(".", 1)[1] for a in self.attributes
                        if "." in a and a.split(".", 1)[0].casefold() == key.casefold()]
                if any(a.casefold() == key.casefold() for a in self.attributes):
                    out[key] = value
                elif subs and isinstance(value, dict):
                    out[key] = {k: v for k, v in value.items() if k.casefold() in {s.casefold() for s in subs}}
                elif subs and isinstance(value, list):
                    folded = {s.casefold() for s in subs}
                    out[key] = [{k: v for k, v in item.items() if k.casefold() in folded}
                                for item in value if isinstance(item, dict)]
            return out
        if self.excluded:
            out = dict(resource)
            for name in self.excluded:
                top, _, sub = name.partition(".")
                found = next((k for k in out if k.casefold() == top.casefold()), None)
                if found is None or found in _ALWAYS:
                    continue
                if not sub:
                    del out[found]
                elif isinstance(out[found], dict):
                    out[found] = {k: v for k, v in out[found].items() if k.casefold() != sub.casefold()}
            return out
        return resource
