"""POST /prompt's check of a graph, as ComfyUI's execution.validate_prompt makes it.

The same walk gives the same refusals: every class known, at least one
output node, and then from each output node up its links, each node's
required inputs present, converted to their types, within their limits and,
for a list, one of its values. A node's own check (LoadImage's, that its file
exists) replaces the list check for the inputs it covers.

ComfyUI's quirks are kept on purpose, since a client reads them: a link to a
node the graph does not have is not checked before it is followed, so it
surfaces as an exception (KeyError, with the missing id as its text) filed
under the node that holds the link, or, when that is the output node itself,
under the output node as "exception_during_validation".
"""

from __future__ import annotations

from typing import Any

from llmgw.sim.comfynodes import NODES, Folders

Verdict = tuple[bool, list[dict[str, Any]], str]


def _error(kind: str, message: str, details: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "message": message, "details": details, "extra_info": extra}


def _type_name(e: BaseException) -> str:
    kind = type(e)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _fits(received: Any, wanted: Any) -> bool:
    """comfy_execution.validation.validate_node_input: the same type, "*", or comma-separated types that meet."""
    if received == wanted or received == "*" or wanted == "*":
        return True
    if not isinstance(received, str) or not isinstance(wanted, str):
        return False
    return bool({t.strip() for t in received.split(",")} & {t.strip() for t in wanted.split(",")})


class _Check:
    def __init__(self, prompt: dict[str, Any], folders: Folders):
        self.prompt = prompt
        self.folders = folders
        self.validated: dict[str, Verdict] = {}
        self.walking: set[str] = set()

    def node(self, unique_id: str) -> Verdict:
        if unique_id in self.validated:
            return self.validated[unique_id]
        if unique_id in self.walking:
            raise ValueError(f"node {unique_id} depends on itself through its links (a cycle)")
        self.walking.add(unique_id)
        try:
            return self._node(unique_id)
        finally:
            self.walking.discard(unique_id)

    def _node(self, unique_id: str) -> Verdict:
        inputs = self.prompt[unique_id]["inputs"]
        cls = NODES[self.prompt[unique_id]["class_type"]]
        specs = cls.inputs(self.folders)
        errors: list[dict[str, Any]] = []
        valid = True
        wanted = {**{k: ("optional", v) for k, v in specs.get("optional", {}).items()},
                  **{k: ("required", v) for k, v in specs.get("required", {}).items()}}
        for x, (category, info) in wanted.items():
            kind, options = info[0], (info[1] if len(info) > 1 else {})
            if x not in inputs:
                if category == "required":
                    errors.append(_error("required_input_missing", "Required input is missing", x, input_name=x))
                continue
            val = inputs[x]
            if isinstance(val, list):
                if len(val) != 2:
                    errors.append(_error("bad_linked_input",
                                         "Bad linked input, must be a length-2 list of [node_id, slot_index]", x,
                                         input_name=x, input_config=info, received_value=val))
                    continue
                o_id = val[0]
                received = NODES[self.prompt[o_id]["class_type"]].returns[val[1]]  # KeyError/IndexError: as ComfyUI
                if not _fits(received, kind):
                    errors.append(_error("return_type_mismatch", "Return type mismatch between linked nodes",
                                         f"{x}, received_type({received}) mismatch input_type({kind})",
                                         input_name=x, input_config=info, received_type=received, linked_node=val))
                    continue
                try:
                    if self.node(o_id)[0] is False:
                        valid = False
                except Exception as ex:  # noqa: BLE001 - ComfyUI files any exception under the linked node
                    valid = False
                    self.validated[o_id] = (False, [_error(
                        "exception_during_inner_validation", "Exception when validating inner node", str(ex),
                        input_name=x, input_config=info, exception_message=str(ex), exception_type=_type_name(ex),
                        traceback=[], linked_node=val)], o_id)
                continue
            if isinstance(val, dict) and "__value__" in val:
                val = inputs[x] = val["__value__"]
            try:
                if kind == "INT":
                    val = inputs[x] = int(val)
                elif kind == "FLOAT":
                    val = inputs[x] = float(val)
                elif kind == "STRING":
                    val = inputs[x] = str(val)
                elif kind == "BOOLEAN":
                    val = inputs[x] = bool(val)
            except (TypeError, ValueError) as ex:
                errors.append(_error("invalid_input_type", f"Failed to convert an input value to a {kind} value",
                                     f"{x}, {val}, {ex}", input_name=x, input_config=info, received_value=val,
                                     exception_message=str(ex)))
                continue
            if x in cls.validated_inputs:
                continue
            if "min" in options and val < options["min"]:
                errors.append(_error("value_smaller_than_min", f"Value {val} smaller than min of {options['min']}",
                                     x, input_name=x, input_config=info, received_value=val))
                continue
            if "max" in options and val > options["max"]:
                errors.append(_error("value_bigger_than_max", f"Value {val} bigger than max of {options['max']}",
                                     x, input_name=x, input_config=info, received_value=val))
                continue
            if isinstance(kind, list) and val not in kind:
                # ComfyUI leaves out long lists (scanned model files) from the answer.
                listed, config = (f"(list of length {len(kind)})", None) if len(kind) > 20 else (str(kind), info)
                errors.append(_error("value_not_in_list", "Value not in list", f"{x}: '{val}' not in {listed}",
                                     input_name=x, input_config=config, received_value=val))
        if cls.validate is not None and all(x in inputs for x in cls.validated_inputs):
            verdict = cls.validate(self.folders, inputs)
            if verdict is not True:
                for x in cls.validated_inputs:
                    details = x if verdict is False else f"{x} - {verdict}"
                    errors.append(_error("custom_validation_failed", "Custom validation failed for node", details,
                                         input_name=x))
        result: Verdict = (False, errors, unique_id) if errors or not valid else (True, [], unique_id)
        self.validated[unique_id] = result
        return result


def validate_prompt(prompt: Any, folders: Folders,
                    partial: list[str] | None = None) -> tuple[bool, Any, list[str], dict[str, Any]]:
    """(valid, error, output node ids to run, node_errors): execution.validate_prompt's four answers."""
    if not isinstance(prompt, dict):
        return False, _error("invalid_prompt", "Cannot execute because the prompt is not an object of nodes by id.",
                             "", ), [], {}
    outputs: list[str] = []
    for x, node in prompt.items():
        if not isinstance(node, dict) or "class_type" not in node:
            title = node.get("_meta", {}).get("title") if isinstance(node, dict) else None
            return False, _error("missing_node_type",
                                 f"Node '{title or f'ID #{x}'}' has no class_type. The workflow may be corrupted "
                                 "or a custom node is missing.", f"Node ID '#{x}'",
                                 node_id=x, class_type=None, node_title=title), [], {}
        cls = NODES.get(node["class_type"]) if isinstance(node["class_type"], str) else None
        if cls is None:
            meta = node.get("_meta")
            title = (meta.get("title") if isinstance(meta, dict) else None) or node["class_type"]
            return False, _error("missing_node_type",
                                 f"Node '{title}' not found. The custom node may not be installed.",
                                 f"Node ID '#{x}'", node_id=x, class_type=node["class_type"],
                                 node_title=title), [], {}
        if cls.output_node and (partial is None or x in partial):
            outputs.append(x)
    if not outputs:
        return False, _error("prompt_no_outputs", "Prompt has no outputs", ""), [], {}

    check = _Check(prompt, folders)
    good: list[str] = []
    failed: list[tuple[str, list[dict[str, Any]]]] = []
    node_errors: dict[str, Any] = {}
    for o in outputs:
        try:
            valid, reasons, _ = check.node(o)
        except Exception as ex:  # noqa: BLE001 - as ComfyUI: the exception is the output's reason
            valid, reasons = False, [_error("exception_during_validation", "Exception when validating node", str(ex),
                                            exception_type=_type_name(ex), traceback=[])]
            check.validated[o] = (False, reasons, o)
        if valid:
            good.append(o)
            continue
        failed.append((o, reasons))
        for node_id, (ok, why, _) in check.validated.items():
            # A node downstream of a bad one is invalid too but has no reasons of its own: left out, as ComfyUI does.
            if not ok and why:
                entry = node_errors.setdefault(node_id, {"errors": why, "dependent_outputs": [],
                                                         "class_type": prompt[node_id]["class_type"]})
                entry["dependent_outputs"].append(o)
    if not good:
        lines = [f"{e['message']}: {e['details']}" for _, reasons in failed for e in reasons]
        return False, _error("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                             "\n".join(lines)), [], node_errors
    return True, None, good, node_errors
