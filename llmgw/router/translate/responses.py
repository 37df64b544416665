"""OpenAI's Responses API (POST /v1/responses) to and from chat completions.

Codex and the OpenAI SDKs' `client.responses` speak this shape; the engines
speak only chat completions. The gateway keeps no responses, so everything a
response needs must be in its request: `previous_response_id`, stored prompts
and conversations are refused with a sentence saying to send the whole
conversation. docs/api-shapes.md has the field-by-field table.
"""

from __future__ import annotations

from typing import Any

from llmgw.router.translate.common import (
    TranslateError,
    checked_tools,
    encode_sse,
    image_part,
    is_number,
    is_positive_int,
    join_text,
    json_type,
)
from llmgw.router.translate.responses_answer import ResponsesStream, chat_to_response
from llmgw.router.translate.responses_tools import HOSTED, flat_name, hosted_tools, is_hosted, namespaced_names
from llmgw.router.wire import JSON

__all__ = ["HOSTED", "ResponsesStream", "TranslateError", "chat_to_response", "encode_sse", "flat_name", "hosted_tools",
           "namespaced_names", "responses_to_chat"]

_STATELESS = ("this gateway keeps no responses, so it cannot continue one; send the whole conversation in "
              "input (with store: false)")

_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


# -- the request --------------------------------------------------------------


def responses_to_chat(body: JSON, *, upstream_model: str, thinking_mode: str = "reasoning_effort") -> JSON:
    """A Responses request as the engine's chat completions request.

    `thinking_mode` is the model's, as for /v1/messages: `reasoning.effort`
    becomes `reasoning_effort` (gpt-oss), `chat_template_kwargs.enable_thinking`
    (Qwen3; effort "none" turns it off) or nothing.
    """
    if not isinstance(body, dict):
        raise TranslateError(f"the request body must be a JSON object, got {json_type(body)}")
    if body.get("previous_response_id") is not None:
        raise TranslateError(f"previous_response_id is not supported: {_STATELESS}", "previous_response_id")
    if body.get("conversation") is not None:
        raise TranslateError(f"conversation is not supported: {_STATELESS}", "conversation")
    if body.get("prompt") is not None:
        raise TranslateError("prompt (a stored prompt template) is not supported: this gateway keeps no prompts; "
                             "send the instructions and input themselves", "prompt")
    if body.get("background") is True:
        raise TranslateError("background responses are not supported: this gateway keeps no responses to fetch "
                             "later; ask with stream: true instead", "background")

    system: list[str] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise TranslateError(f"instructions must be a string, got {json_type(instructions)}", "instructions")
        if instructions:
            system.append(instructions)
    messages = _input(body.get("input"), system)
    if system:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system)})

    chat: dict[str, Any] = {"model": upstream_model, "messages": messages}
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None:
        if not is_positive_int(max_tokens):
            raise TranslateError(f"max_output_tokens must be a positive integer, got {max_tokens!r}",
                                 "max_output_tokens")
        chat["max_tokens"] = max_tokens
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            if not is_number(body[name]):
                raise TranslateError(f"{name} must be a number, got {json_type(body[name])}", name)
            chat[name] = body[name]
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise TranslateError(f"stream must be true or false, got {json_type(stream)}", "stream")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    user = body.get("safety_identifier") or body.get("user")
    if isinstance(user, str) and user:
        chat["user"] = user
    if isinstance(body.get("parallel_tool_calls"), bool):
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]

    _tools(body, chat)
    _reasoning(body.get("reasoning"), thinking_mode, chat)
    _text_format(body.get("text"), chat)
    return chat


def _input(items: Any, system: list[str]) -> list[JSON]:
    """The input items as chat messages; system and developer text before the
    first other message joins `system`, since many chat templates (Qwen,
    Llama) refuse a system message anywhere but first."""
    if items is None:
        raise TranslateError("input is required: a string or an array of input items", "input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise TranslateError(f"input must be a string or a non-empty array of items, got {json_type(items)}", "input")

    messages: list[JSON] = []
    waiting_images: list[JSON] = []  # from tool outputs, sent once the run of tool messages ends
    for i, item in enumerate(items):
        at = f"input.{i}"
        if not isinstance(item, dict):
            raise TranslateError(f"{at} must be an object, got {json_type(item)}", at)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind != "function_call_output" and waiting_images:
            messages.append({"role": "user", "content": waiting_images})
            waiting_images = []
        if kind == "message":
            _message(item, at, messages, system)
        elif kind == "function_call":
            _function_call(item, at, messages)
        elif kind == "function_call_output":
            message, images = _function_output(item, at)
            messages.append(message)
            waiting_images.extend(images)
        elif kind == "reasoning":
            # The model's earlier thinking: chat templates drop it from past
            # turns, and what Codex sends back may be encrypted OpenAI state.
            continue
        elif kind == "item_reference":
            raise TranslateError(f"{at}: item_reference is not supported: {_STATELESS}", f"{at}.type")
        elif kind is None:
            raise TranslateError(f"{at} needs a type (message, function_call, function_call_output)", f"{at}.type")
        else:
            raise TranslateError(f"{at}: input items of type {kind!r} are not supported; this gateway takes "
                                 "message, function_call, function_call_output and reasoning items", f"{at}.type")
    if waiting_images:
        messages.append({"role": "user", "content": waiting_images})
    if not messages:
        raise TranslateError("input holds no message the model could answer", "input")
    return messages


def _message(item: JSON, at: str, messages: list[JSON], system: list[str]) -> None:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise TranslateError(f"{at}.role must be user, assistant, system or developer, got {role!r}", f"{at}.role")
    parts = _parts(item.get("content"), at, allow_images=role == "user")
    if role in ("system", "developer"):
        # Open engines' chat templates know no "developer" role.
        text = join_text([p["text"] for p in parts])
        if not messages:
            system.append(text)
        else:
            messages.append({"role": "system", "content": text})
    elif role == "assistant":
        messages.append({"role": "assistant", "content": "".join(p["text"] for p in parts)})
    elif all(p["type"] == "text" for p in parts):
        messages.append({"role": "user", "content": join_text([p["text"] for p in parts])})
    else:
        messages.append({"role": "user", "content": parts})


def _parts(content: Any, at: str, *, allow_images: bool) -> list[JSON]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TranslateError(f"{at}.content must be a string or an array of content parts, got {json_type(content)}",
                             f"{at}.content")
    parts = []
    for j, part in enumerate(content):
        part_at = f"{at}.content.{j}"
        if not isinstance(part, dict):
            raise TranslateError(f"{part_at} must be an object, got {json_type(part)}", part_at)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(part.get("text"), str):
                raise TranslateError(f"{part_at}: a {kind} part needs its text as a string", f"{part_at}.text")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part.get("refusal") or ""})
        elif kind == "input_image":
            if not allow_images:
                raise TranslateError(f"{part_at}: only a user message may hold an image", f"{part_at}.type")
            parts.append(_image(part, part_at))
        elif kind == "input_file":
            raise TranslateError(f"{part_at}: input_file parts are not supported; send the file's text as "
                                 "input_text", f"{part_at}.type")
        else:
            raise TranslateError(f"{part_at}: unknown content part type {kind!r}; this gateway takes input_text, "
                                 "output_text and input_image", f"{part_at}.type")
    return parts


def _image(part: JSON, at: str) -> JSON:
    url = part.get("image_url")
    if isinstance(url, str) and url:
        detail = part.get("detail")
        return image_part(url, detail if detail in ("low", "high", "auto") else None)
    if part.get("file_id"):
        raise TranslateError(f"{at}: images by file_id are not supported: this gateway keeps no files; send the "
                             "image as a data: or https: URL in image_url", f"{at}.file_id")
    raise TranslateError(f"{at}: an input_image part needs image_url", f"{at}.image_url")


def _function_call(item: JSON, at: str, messages: list[JSON]) -> None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "")
    if not isinstance(call_id, str) or not call_id:
        raise TranslateError(f"{at}: a function_call item needs its call_id", f"{at}.call_id")
    if not isinstance(name, str) or not name:
        raise TranslateError(f"{at}: a function_call item needs the function's name", f"{at}.name")
    if not isinstance(arguments, str):
        raise TranslateError(f"{at}.arguments must be a JSON string, got {json_type(arguments)}", f"{at}.arguments")
    namespace = item.get("namespace")
    if isinstance(namespace, str) and namespace:
        # An earlier call of a namespace's function: named as the engine was told it.
        name = flat_name(namespace, name)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = messages[-1] if messages else None
    # One assistant turn in chat completions holds its text and all of its
    # calls; the Responses API lists them as separate items one after another.
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        if last.get("content") == "":
            last["content"] = None
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _function_output(item: JSON, at: str) -> tuple[JSON, list[JSON]]:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise TranslateError(f"{at}: a function_call_output item needs the call_id it answers", f"{at}.call_id")
    output = item.get("output", "")
    images: list[JSON] = []
    if isinstance(output, str):
        text = output
    elif isinstance(output, list):
        texts = []
        for j, part in enumerate(output):
            part_at = f"{at}.output.{j}"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "input_image":
                if not images:
                    images.append({"type": "text", "text": f"The output of function call {call_id} included:"})
                images.append(_image(part, part_at))
            else:
                raise TranslateError(f"{part_at}: a function's output may hold input_text and input_image parts, "
                                     f"got {kind!r}", f"{part_at}.type")
        text = join_text(texts)
    else:
        raise TranslateError(f"{at}.output must be a string or an array of parts, got {json_type(output)}",
                             f"{at}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _tools(body: JSON, chat: JSON) -> None:
    out = []
    tools = body.get("tools")
    if isinstance(tools, list):
        # Left out before the list is checked: what the engine cannot run is
        # no reason to refuse the rest.
        body = {**body, "tools": [t for t in tools if not is_hosted(t)]}
    names: set[str] = set()
    for at, tool in checked_tools(body, types=("function", "namespace"), other_type=(
            "tools of type {kind} are not supported here; this gateway takes tools of type \"function\" and "
            "\"namespace\", and leaves out the ones that run at OpenAI (web_search, code_interpreter, "
            "image_generation, computer use, file_search)")):
        if tool["type"] == "namespace":
            inner = tool.get("tools")
            if not isinstance(inner, list) or not inner:
                raise TranslateError(f"{at}.tools must be a non-empty array of function tools", f"{at}.tools")
            for j, function in enumerate(inner):
                where = f"{at}.tools.{j}"
                if not isinstance(function, dict) or function.get("type") != "function":
                    raise TranslateError(f"{where}: a namespace may hold function tools only", f"{where}.type")
                if not isinstance(function.get("name"), str) or not function["name"]:
                    raise TranslateError(f"{where} needs a name", f"{where}.name")
                out.append(_function(function, where, flat_name(tool["name"], function["name"]), names))
        else:
            out.append(_function(tool, at, tool["name"], names))
    if not out:
        return
    chat["tools"] = out
    choice = body.get("tool_choice")
    if choice is None:
        return
    if choice in ("auto", "none", "required"):
        chat["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        name = choice["name"]
        if isinstance(choice.get("namespace"), str) and choice["namespace"]:
            name = flat_name(choice["namespace"], name)
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise TranslateError("tool_choice must be \"auto\", \"none\", \"required\" or "
                             "{\"type\": \"function\", \"name\": ...}", "tool_choice")


def _function(tool: JSON, at: str, name: str, names: set[str]) -> JSON:
    if name in names:
        raise TranslateError(f"{at}: two tools are called {name} (a namespace's functions are known to the model "
                             "as NAMESPACE__NAME); give each tool a name of its own", f"{at}.name")
    names.add(name)
    parameters = tool.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    elif not isinstance(parameters, dict):
        raise TranslateError(f"{at}.parameters must be a JSON schema object", f"{at}.parameters")
    function: dict[str, Any] = {"name": name, "parameters": parameters}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _reasoning(reasoning: Any, mode: str, chat: JSON) -> None:
    if reasoning is None:
        return
    if not isinstance(reasoning, dict):
        raise TranslateError(f"reasoning must be an object like {{\"effort\": \"medium\"}}, got {json_type(reasoning)}",
                             "reasoning")
    effort = reasoning.get("effort")
    if effort is None:
        return
    # A list or an object here once reached the dictionary lookup below and
    # failed there as a 500 (issue 10, item 3): only a string can name an effort.
    if not isinstance(effort, str) or (effort != "none" and effort not in _EFFORTS):
        raise TranslateError(f"reasoning.effort must be none, minimal, low, medium, high or xhigh, got {effort!r}",
                             "reasoning.effort")
    if mode == "chat_template_kwargs":
        chat["chat_template_kwargs"] = {"enable_thinking": effort != "none"}
    elif mode == "reasoning_effort" and effort != "none":
        # gpt-oss on vLLM knows low, medium and high only.
        chat["reasoning_effort"] = _EFFORTS[effort]


def _text_format(text: Any, chat: JSON) -> None:
    if not isinstance(text, dict) or not isinstance(text.get("format"), dict):
        return
    fmt = text["format"]
    kind = fmt.get("type")
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise TranslateError("text.format of type json_schema needs a schema object", "text.format.schema")
        schema: dict[str, Any] = {"name": fmt.get("name") or "output", "schema": fmt["schema"]}
        if isinstance(fmt.get("strict"), bool):
            schema["strict"] = fmt["strict"]
        if isinstance(fmt.get("description"), str):
            schema["description"] = fmt["description"]
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif kind == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif kind not in (None, "text"):
        raise TranslateError(f"text.format.type must be text, json_schema or json_object, got {kind!r}",
                             "text.format.type")
