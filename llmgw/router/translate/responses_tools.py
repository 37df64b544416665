"""The Responses API's tools that the engines' chat completions have no word for: namespaces, and OpenAI's own.

Shared by the request's translation (responses.py) and the answer's
(responses_answer.py), which reads the client's request again to put a
call back under its namespace.
"""

from __future__ import annotations

from typing import Any

# Tools that run at OpenAI (a search engine, a sandbox, an image model, a
# browser): nothing here could run them, so they are left out of the request.
HOSTED = frozenset((
    "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
    "code_interpreter", "image_generation", "computer", "computer_use", "computer_use_preview", "file_search",
))


def is_hosted(tool: Any) -> bool:
    """Whether `tool` is one of OpenAI's own. Its type is the client's JSON: a list or an object there
    is no tool of ours and must reach the check that refuses it, not a set lookup that cannot hash it."""
    return isinstance(tool, dict) and isinstance(tool.get("type"), str) and tool["type"] in HOSTED


def hosted_tools(body: Any) -> list[str]:
    """The types of the request's tools that run at OpenAI, which the engine never sees (each once, in order).

    Codex sends `web_search` on every turn whatever it is asked: refusing
    the request would refuse every request, so these are left out of what
    the engine sees and the handler says so (X-Llmgw-Tools-Dropped, and the
    usage row's detail.tools_dropped).
    """
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list):
        return []
    return list(dict.fromkeys(t["type"] for t in tools if is_hosted(t)))


def namespaced_names(body: Any) -> dict[str, tuple[str, str]]:
    """The functions of the request's `namespace` tools: the name the engine knows each by -> (namespace, name).

    The engines know no namespaces, so a namespace's functions reach them
    as functions of their own, named as Codex names them when it flattens
    one: the namespace, then `__`, then the function's name (no `__` when
    the namespace already ends in `_` or the name begins with one). An
    answer's call of such a name goes back to the client as a
    `function_call` with `namespace` and the function's own `name`.
    """
    tools = body.get("tools") if isinstance(body, dict) else None
    names: dict[str, tuple[str, str]] = {}
    if not isinstance(tools, list):
        return names
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "namespace" or not isinstance(tool.get("name"), str):
            continue
        inner_tools = tool.get("tools")
        for inner in inner_tools if isinstance(inner_tools, list) else []:
            if isinstance(inner, dict) and isinstance(inner.get("name"), str) and inner["name"]:
                names[flat_name(tool["name"], inner["name"])] = (tool["name"], inner["name"])
    return names


def flat_name(namespace: str, name: str) -> str:
    """A namespaced function's name as the engine knows it."""
    if namespace.endswith("_") or name.startswith("_"):
        return namespace + name
    return f"{namespace}__{name}"
