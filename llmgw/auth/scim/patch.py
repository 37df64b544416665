"""PATCH (RFC 7644 3.5.2) applied to a resource as a dict; the caller then saves it as a PUT would.

Providers differ from the RFC and from each other, so what they send is
taken as they send it:
- Entra ID capitalises the op ("Replace") and sends booleans as strings
  ("False"); the op is read without regard to case, and the resource's
  own code reads the string as a boolean;
- a replace or add without a path carries an object of attributes, whose
  names may be paths themselves ("name.givenName", an extension's URN);
- `members[value eq "…"]` removes one member, and Entra's older remove
  with `path: members` and a `value` list removes just those;
- a replace or add at `emails[type eq "work"].value` makes that e-mail when
  there is none of that type, as Entra expects.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from llmgw.auth.scim.errors import ScimError
from llmgw.auth.scim.filter import Attr, Compare, Logical, Node, PatchPath, lookup, matches, parse_path
from llmgw.errors import N_

_READ_ONLY = {"id", "meta", "schemas"}
MAX_OPERATIONS = 1000


def _key(data: dict[str, Any], name: str) -> str:
    """The key `name` is held under (matched without regard to case), else `name` itself."""
    folded = name.casefold()
    return next((k for k in data if k.casefold() == folded), name)


def _container(resource: dict[str, Any], attr: Attr, make: bool) -> dict[str, Any] | None:
    """The dict that holds attr's last name: the resource, an extension's object, or a complex attribute."""
    holder: Any = resource
    if attr.urn:
        key = _key(holder, attr.urn)
        if key not in holder:
            if not make:
                return None
            holder[key] = {}
        holder = holder[key]
    for name in attr.names[:-1]:
        key = _key(holder, name)
        if not isinstance(holder.get(key), dict):
            if not make:
                return None
            holder[key] = {}
        holder = holder[key]
    return holder if isinstance(holder, dict) else None


def _equals_of(node: Node) -> dict[str, Any]:
    """The sub-attributes an `eq` filter pins (`type eq "work"`): what a value made for it starts with."""
    if isinstance(node, Compare) and node.op == "eq" and len(node.attr.names) == 1:
        return {node.attr.names[0]: node.value}
    if isinstance(node, Logical) and node.op == "and":
        return _equals_of(node.left) | _equals_of(node.right)
    return {}


def _merge(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for k, v in new.items():
            merged[_key(merged, k)] = _merge(merged.get(_key(merged, k)), v)
        return merged
    return copy.deepcopy(new)


def _add_values(old: Any, new: Any) -> list[Any]:
    values = list(old) if isinstance(old, list) else ([] if old is None else [old])
    for v in new if isinstance(new, list) else [new]:
        if v not in values:
            values.append(copy.deepcopy(v))
    return values


def _set(resource: dict[str, Any], attr: Attr, value: Any, op: str) -> None:
    holder = _container(resource, attr, make=True)
    assert holder is not None
    key = _key(holder, attr.names[-1])
    old = holder.get(key)
    if op == "add" and (isinstance(old, list) or isinstance(value, list)):
        holder[key] = _add_values(old, value)
    elif isinstance(old, dict) and isinstance(value, dict):
        holder[key] = _merge(old, value) if op == "add" else copy.deepcopy(value)
    else:
        holder[key] = copy.deepcopy(value)


def _no_target(path: str) -> ScimError:
    return ScimError(400, N_('nothing matches the path "{path}"'), scim_type="noTarget", params={"path": path[:200]})


def _at_filtered(resource: dict[str, Any], path: PatchPath, op: str, value: Any, text: str) -> None:
    holder = _container(resource, path.attr, make=op != "remove")
    if holder is None:
        if op == "remove":
            return
        raise _no_target(text)
    key = _key(holder, path.attr.names[-1])
    items = holder.get(key)
    items = list(items) if isinstance(items, list) else ([] if items is None else [items])
    assert path.where is not None
    hit = [i for i, item in enumerate(items) if isinstance(item, dict) and matches(path.where, item)]
    if op == "remove":
        if path.sub is None:
            items = [item for i, item in enumerate(items) if i not in hit]
        else:
            for i in hit:
                items[i] = {k: v for k, v in items[i].items() if k.casefold() != path.sub.casefold()}
    else:
        if not hit:
            made = _equals_of(path.where)
            if not made:
                raise _no_target(text)
            items.append(made)
            hit = [len(items) - 1]
        for i in hit:
            if path.sub is None:
                items[i] = _merge(items[i], value) if isinstance(value, dict) else value
            else:
                items[i] = dict(items[i]) | {_key(items[i], path.sub): copy.deepcopy(value)}
    if items:
        holder[key] = items
    else:
        holder.pop(key, None)


def _remove(resource: dict[str, Any], path: PatchPath, value: Any) -> None:
    holder = _container(resource, path.attr, make=False)
    if holder is None:
        return
    key = _key(holder, path.attr.names[-1])
    if isinstance(value, list) and isinstance(holder.get(key), list):
        # Entra's older shape: remove just these values ({"value": id} members) from the list.
        gone = {str(v.get("value")) if isinstance(v, dict) else str(v) for v in value}
        kept = [v for v in holder[key] if (str(v.get("value")) if isinstance(v, dict) else str(v)) not in gone]
        holder[key] = kept
        if not kept:
            holder.pop(key)
        return
    holder.pop(key, None)


def _without_path(resource: dict[str, Any], op: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ScimError(400, N_("an {op} without a path takes an object of attributes"), scim_type="invalidValue",
                        params={"op": op})
    for name, item in value.items():
        if name.casefold() in _READ_ONLY:
            continue  # Okta sends the id back in a replace: it is not a change
        if name.lower().startswith("urn:") and isinstance(item, dict) and name.rsplit(":", 1)[-1][:1].isupper():
            # A schema's whole object ("urn:…:enterprise:2.0:User": {...}; a schema's last part is a
            # resource's name, capitalised, an attribute's is not): its attributes one by one.
            for sub, sub_value in item.items():
                _apply_one(resource, op, f"{name}:{sub}", sub_value)
            continue
        _apply_one(resource, op, name, item)


def _apply_one(resource: dict[str, Any], op: str, text: str, value: Any) -> None:
    path = parse_path(text)
    if path.attr.urn is None and path.attr.names[0].casefold() in _READ_ONLY:
        raise ScimError(400, N_("{attribute} cannot be changed"), scim_type="mutability",
                        params={"attribute": path.attr.names[0]})
    if path.where is not None:
        _at_filtered(resource, path, op, value, text)
    elif op == "remove":
        _remove(resource, path, value)
    else:
        _set(resource, path.attr, value, op)


def apply_patch(resource: dict[str, Any], body: Any) -> dict[str, Any]:
    """The resource after the PatchOp `body`; the resource given is left as it was."""
    operations = lookup(body, "Operations") if isinstance(body, dict) else None
    if not isinstance(operations, Sequence) or isinstance(operations, str) or not operations:
        raise ScimError(400, N_("a PATCH takes a PatchOp with a list of Operations"), scim_type="invalidSyntax")
    if len(operations) > MAX_OPERATIONS:
        raise ScimError(400, N_("a PATCH takes at most {most} operations"), scim_type="invalidValue",
                        params={"most": MAX_OPERATIONS})
    patched = copy.deepcopy(resource)
    for operation in operations:
        op = lookup(operation, "op")
        op = op.lower() if isinstance(op, str) else ""
        if op not in ("add", "remove", "replace"):
            raise ScimError(400, N_('"{op}" is not a PATCH operation: add, remove or replace'),
                            scim_type="invalidSyntax", params={"op": str(lookup(operation, "op"))[:50]})
        path = lookup(operation, "path")
        value = lookup(operation, "value")
        if not path:
            if op == "remove":
                raise ScimError(400, N_("a remove needs a path"), scim_type="noTarget")
            _without_path(patched, op, value)
        elif not isinstance(path, str):
            raise ScimError(400, N_('"{path}" is not an attribute path'), scim_type="invalidPath",
                            params={"path": str(path)[:200]})
        else:
            _apply_one(patched, op, path, value)
    return patched
