"""Anthropic's Messages API (POST /v1/messages) to and from chat completions.

Claude Code and the Anthropic SDKs speak this shape; the engines speak only
OpenAI's chat completions. A request becomes a chat request
(`messages_to_chat`), an answer becomes a `message` (`chat_to_message`), and a
streamed answer becomes Anthropic's events as the engine's chunks arrive
(`MessagesStream`). docs/api-shapes.md has the field-by-field table.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.router.translate.anthropic_answer import MessagesStream, anthropic_error, chat_to_message
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
from llmgw.router.wire import JSON

__all__ = [
    "MessagesStream",
    "TranslateError",
    "anthropic_error",
    "chat_to_message",
    "encode_sse",
    "messages_to_chat",
    "wants_thinking",
]

THINKING_MODES = ("chat_template_kwargs", "reasoning_effort", "")

_UNSUPPORTED_BLOCKS = {
    "document": "documents (PDF or plain-text sources) are not supported; send the text as a text block",
    "search_result": "search_result blocks are not supported; send the results as text",
    "server_tool_use": "server tools run at Anthropic and are not available here",
    "web_search_tool_result": "server tools run at Anthropic and are not available here",
    "web_fetch_tool_result": "server tools run at Anthropic and are not available here",
    "code_execution_tool_result": "server tools run at Anthropic and are not available here",
    "bash_code_execution_tool_result": "server tools run at Anthropic and are not available here",
    "text_editor_code_execution_tool_result": "server tools run at Anthropic and are not available here",
    "tool_search_tool_result": "server tools run at Anthropic and are not available here",
    "container_upload": "containers run at Anthropic and are not available here",
}

def wants_thinking(body: JSON) -> bool:
    """Whether the client asked to see the model's thinking.

    Reasoning a client did not ask for is left out of the answer, as the Go
    original did: a client that never asked may not know thinking blocks.
    """
    thinking = body.get("thinking") if isinstance(body, dict) else None
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive", "between_tools")


# -- the request --------------------------------------------------------------


def messages_to_chat(body: JSON, *, upstream_model: str, thinking_mode: str) -> JSON:
    """An Anthropic Messages request as the engine's chat completions request.

    `thinking_mode` says how the engine is told to think: "chat_template_kwargs"
    (Qwen3, DeepSeek: `enable_thinking` in the chat template), "reasoning_effort"
    (gpt-oss) or "" (the model cannot be told). Raises TranslateError with a
    sentence for anything the engines cannot be asked.
    """
    if thinking_mode not in THINKING_MODES:
        raise ValueError(f"thinking_mode must be one of {THINKING_MODES}, got {thinking_mode!r}")
    if not isinstance(body, dict):
        raise TranslateError(f"the request body must be a JSON object, got {json_type(body)}")

    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise TranslateError("max_tokens is required: say how many tokens the answer may have at most",
                             "max_tokens")
    if not is_positive_int(max_tokens):
        raise TranslateError(f"max_tokens must be a positive integer, got {max_tokens!r}", "max_tokens")

    chat: dict[str, Any] = {"model": upstream_model, "messages": [], "max_tokens": max_tokens}
    system = _system_text(body.get("system"))
    if system is not None:
        chat["messages"].append({"role": "system", "content": system})

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TranslateError("messages must be a non-empty array of {role, content} objects", "messages")
    for i, message in enumerate(messages):
        chat["messages"].extend(_message(message, f"messages.{i}"))

    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            if not is_number(body[name]):
                raise TranslateError(f"{name} must be a number, got {json_type(body[name])}", name)
            chat[name] = body[name]
    if body.get("top_k") is not None:
        if not isinstance(body["top_k"], int) or isinstance(body["top_k"], bool):
            raise TranslateError(f"top_k must be an integer, got {json_type(body['top_k'])}", "top_k")
        chat["top_k"] = body["top_k"]  # vLLM, SGLang and llama.cpp all take top_k
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise TranslateError("stop_sequences must be an array of strings", "stop_sequences")
        if stops:
            chat["stop"] = stops

    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise TranslateError(f"stream must be true or false, got {json_type(stream)}", "stream")
    if stream:
        chat["stream"] = True
        # The usage arrives in a last chunk only when asked for; without it
        # message_delta could not carry the real token counts.
        chat["stream_options"] = {"include_usage": True}

    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str) and metadata["user_id"]:
        chat["user"] = metadata["user_id"]

    _tools(body, chat)
    _thinking(body.get("thinking"), thinking_mode, chat)
    _output_format(body.get("output_config"), chat)
    return chat


def _system_text(system: Any) -> str | None:
    if system is None:
        return None
    if isinstance(system, str):
        return system or None
    if isinstance(system, list):
        texts = []
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
                raise TranslateError(f"system.{i} must be a text block ({{\"type\": \"text\", \"text\": ...}})",
                                     f"system.{i}")
            texts.append(block["text"])
        return join_text(texts) if texts else None
    raise TranslateError(f"system must be a string or an array of text blocks, got {json_type(system)}", "system")


def _message(message: Any, where: str) -> list[JSON]:
    """One Anthropic message as one or more chat messages.

    A user turn's tool_result blocks become `tool` messages, which chat
    completions wants straight after the assistant's tool calls, so they come
    first and the turn's other content follows as a user message.
    """
    if not isinstance(message, dict):
        raise TranslateError(f"{where} must be an object with role and content, got {json_type(message)}", where)
    role = message.get("role")
    if role not in ("user", "assistant", "system"):
        raise TranslateError(f"{where}.role must be \"user\" or \"assistant\", got {role!r}", f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise TranslateError(f"{where}.content must be a string or an array of content blocks, "
                             f"got {json_type(content)}", f"{where}.content")
    if role == "assistant":
        return [_assistant(content, where)]
    if role == "system":
        return [{"role": "system", "content": join_text(_texts_only(content, where))}]
    return _user(content, where)


def _texts_only(content: list[Any], where: str) -> list[str]:
    texts = []
    for j, block in enumerate(content):
        kind = _block_type(block, f"{where}.content.{j}")
        if kind != "text":
            raise TranslateError(f"{where}.content.{j}: a system message may hold only text blocks, got {kind!r}",
                                 f"{where}.content.{j}.type")
        texts.append(_text(block, f"{where}.content.{j}"))
    return texts


def _assistant(content: list[Any], where: str) -> JSON:
    texts: list[str] = []
    calls: list[JSON] = []
    for j, block in enumerate(content):
        at = f"{where}.content.{j}"
        kind = _block_type(block, at)
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        elif kind in ("thinking", "redacted_thinking"):
            # Thinking from earlier turns is not sent back: the engines'
            # chat templates drop it anyway, and its signature is ours, not
            # the model's, so it proves nothing.
            continue
        else:
            _refuse_block(kind, at)
    out: dict[str, Any] = {"role": "assistant", "content": join_text(texts) if texts else ("" if not calls else None)}
    if calls:
        out["tool_calls"] = calls
    return out


def _tool_call(block: JSON, at: str) -> JSON:
    if not isinstance(block.get("id"), str) or not block["id"]:
        raise TranslateError(f"{at}: a tool_use block needs an id", f"{at}.id")
    if not isinstance(block.get("name"), str) or not block["name"]:
        raise TranslateError(f"{at}: a tool_use block needs a name", f"{at}.name")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise TranslateError(f"{at}.input must be an object, got {json_type(arguments)}", f"{at}.input")
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": orjson.dumps(arguments).decode()}}


def _user(content: list[Any], where: str) -> list[JSON]:
    tool_messages: list[JSON] = []
    parts: list[JSON] = []
    for j, block in enumerate(content):
        at = f"{where}.content.{j}"
        kind = _block_type(block, at)
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, at)})
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "tool_result":
            message, images = _tool_result(block, at)
            tool_messages.append(message)
            if images:
                # A tool message holds only text; a screenshot a tool returned
                # goes to the model in the user turn that follows, said to be
                # the tool's so the model does not take it for the person's.
                parts.append({"type": "text",
                              "text": f"The result of tool call {block['tool_use_id']} included this image:"})
                parts.extend(images)
        else:
            _refuse_block(kind, at)
    out = list(tool_messages)
    if parts or not tool_messages:
        out.append({"role": "user", "content": _user_content(parts)})
    return out


def _user_content(parts: list[JSON]) -> str | list[JSON]:
    # Text alone goes as one string: every engine's chat template takes a
    # string, and not all of them take a list of parts.
    if all(p["type"] == "text" for p in parts):
        return join_text([p["text"] for p in parts])
    return parts


def _tool_result(block: JSON, at: str) -> tuple[JSON, list[JSON]]:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise TranslateError(f"{at}: a tool_result block needs the tool_use_id it answers", f"{at}.tool_use_id")
    content = block.get("content", "")
    texts: list[str] = []
    images: list[JSON] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for k, inner in enumerate(content):
            inner_at = f"{at}.content.{k}"
            kind = _block_type(inner, inner_at)
            if kind == "text":
                texts.append(_text(inner, inner_at))
            elif kind == "image":
                images.append(_image(inner, inner_at))
            else:
                _refuse_block(kind, inner_at)
    else:
        raise TranslateError(f"{at}.content must be a string or an array of blocks, got {json_type(content)}",
                             f"{at}.content")
    text = join_text(texts)
    if block.get("is_error") is True:
        # Chat completions has no error flag on a tool message; the model is
        # told in words, which is what it would read in Anthropic's prompt.
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": tool_use_id, "content": text}, images


def _image(block: JSON, at: str) -> JSON:
    source = block.get("source")
    if not isinstance(source, dict):
        raise TranslateError(f"{at}: an image block needs a source", f"{at}.source")
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str) or not data:
            raise TranslateError(f"{at}.source: a base64 image needs media_type and data", f"{at}.source")
        return image_part(f"data:{media_type};base64,{data}")
    if kind == "url":
        if not isinstance(source.get("url"), str) or not source["url"]:
            raise TranslateError(f"{at}.source: a url image needs its url", f"{at}.source.url")
        return image_part(source["url"])
    if kind == "file":
        raise TranslateError(f"{at}.source: images from Anthropic's Files API are not available here; "
                             "send the image as base64 or a url", f"{at}.source.type")
    raise TranslateError(f"{at}.source.type must be \"base64\" or \"url\", got {kind!r}", f"{at}.source.type")


def _block_type(block: Any, at: str) -> str:
    if not isinstance(block, dict):
        raise TranslateError(f"{at} must be a content block object, got {json_type(block)}", at)
    kind = block.get("type")
    if not isinstance(kind, str):
        raise TranslateError(f"{at} needs a type (\"text\", \"image\", \"tool_use\", \"tool_result\")", f"{at}.type")
    return kind


def _text(block: JSON, at: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise TranslateError(f"{at}: a text block needs its text as a string", f"{at}.text")
    return text


def _refuse_block(kind: str, at: str) -> None:
    reason = _UNSUPPORTED_BLOCKS.get(kind)
    if reason:
        raise TranslateError(f"{at}: {reason}", f"{at}.type")
    raise TranslateError(f"{at}: unknown content block type {kind!r}; this gateway takes text, image, "
                         "tool_use, tool_result and thinking blocks", f"{at}.type")


def _tools(body: JSON, chat: JSON) -> None:
    out = []
    for at, tool in checked_tools(body, types=(None, "custom"), other_type=(
            "the server tool {kind} runs at Anthropic and is not available here; "
            "define it as a tool of your own with name, description and input_schema")):
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise TranslateError(f"{at}.input_schema must be a JSON schema object", f"{at}.input_schema")
        function: dict[str, Any] = {"name": tool["name"], "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    if not out:
        return
    chat["tools"] = out

    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict):
        raise TranslateError(f"tool_choice must be an object like {{\"type\": \"auto\"}}, got {json_type(choice)}",
                             "tool_choice")
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool":
        if not isinstance(choice.get("name"), str) or not choice["name"]:
            raise TranslateError("tool_choice of type \"tool\" needs the tool's name", "tool_choice.name")
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise TranslateError(f"tool_choice.type must be auto, any, tool or none, got {kind!r}", "tool_choice.type")
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def _thinking(thinking: Any, mode: str, chat: JSON) -> None:
    if thinking is None:
        return
    if not isinstance(thinking, dict):
        raise TranslateError(f"thinking must be an object like {{\"type\": \"enabled\", \"budget_tokens\": 2048}}, "
                             f"got {json_type(thinking)}", "thinking")
    kind = thinking.get("type")
    if kind not in ("enabled", "disabled", "adaptive", "between_tools"):
        raise TranslateError(f"thinking.type must be enabled, adaptive or disabled, got {kind!r}", "thinking.type")
    budget = thinking.get("budget_tokens")
    if kind == "enabled" and not is_positive_int(budget):
        raise TranslateError("thinking of type \"enabled\" needs budget_tokens, a positive integer",
                             "thinking.budget_tokens")
    on = kind != "disabled"
    if mode == "chat_template_kwargs":
        chat["chat_template_kwargs"] = {"enable_thinking": on}
    elif mode == "reasoning_effort" and on:
        chat["reasoning_effort"] = _effort(budget)


def _effort(budget: Any) -> str:
    # gpt-oss knows three efforts, Anthropic a token budget; these bounds put
    # Claude Code's own budgets (4k "think", 10k "think hard", 32k
    # "ultrathink") one in each.
    if not is_positive_int(budget):
        return "medium"
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


def _output_format(config: Any, chat: JSON) -> None:
    if not isinstance(config, dict):
        return
    fmt = config.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
