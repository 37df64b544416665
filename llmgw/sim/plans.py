"""From a request's JSON to what the sim will answer, or the 400 that says why not.

A plan holds only counts and choices; the bytes are made in wire.py. Each
check answers as vLLM does where vLLM has a sentence (the context length,
an unknown model), so a router's error handling is tested against the real
wording.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.sim import tokens
from llmgw.sim.config import SimConfig


class Refused(Exception):
    """A request the sim answers with an OpenAI error object instead of a completion."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


@dataclass(slots=True)
class ChatPlan:
    stream: bool
    include_usage: bool
    prompt_tokens: int
    reasoning: int
    content: int
    finish: str
    tool_name: str | None = None
    tool_arguments: str = ""
    echo: tuple[str, ...] | None = None  # --echo: the answer's words, in place of the word list
    cached: int | None = None  # --tokenizer: the prompt tokens its prefix cache held; else the rule in tokens.py

    @property
    def tool_pieces(self) -> list[str]:
        return tokens.argument_pieces(self.tool_arguments)

    @property
    def completion_tokens(self) -> int:
        if self.tool_name is not None:
            # The name is one token, each streamed piece of the arguments another.
            return self.reasoning + 1 + len(self.tool_pieces)
        return self.reasoning + self.content


@dataclass(slots=True)
class CompletionPlan:
    stream: bool
    include_usage: bool
    prompts: list[int]  # each prompt's token count; one choice each
    count: int
    finish: str
    cached: int | None = None  # as ChatPlan's

    @property
    def prompt_tokens(self) -> int:
        return sum(self.prompts)


@dataclass(slots=True)
class EmbeddingPlan:
    keys: list[bytes]
    prompt_tokens: int
    base64: bool
    dimensions: int


def check_model(body: dict, cfg: SimConfig) -> None:
    model = body.get("model")
    # vLLM takes a request without a model as one for the model it serves.
    if model is not None and model != cfg.model:
        raise Refused(404, f"The model `{model}` does not exist.", "model", "model_not_found")


def check_fail_words(body: dict, cfg: SimConfig) -> None:
    """--fail-on: a request whose messages or prompt hold one of the words gets its status."""
    if not cfg.fail_words:
        return
    text = "\n".join(_strings([body.get("messages"), body.get("prompt")]))
    for word, status in cfg.fail_words.items():
        if word in text:
            raise Refused(status, f"This sim-engine was started to fail requests that contain {word!r} "
                                  f"with {status} (--fail-on).")


def _strings(value: object):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise Refused(400, f"{name} must be true or false, got {value!r}.", name)
    return value


def _include_usage(body: dict, stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise Refused(400, "stream_options must be an object like {\"include_usage\": true}.", "stream_options")
    if not stream:
        raise Refused(400, "stream_options can only be given with stream: true.", "stream_options")
    return bool(options.get("include_usage"))


def _length(body: dict, cfg: SimConfig, prompt_tokens: int, where: str) -> tuple[int, str]:
    """How many tokens to answer with, and the finish_reason that count ends with."""
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    asked = body.get(name)
    room = cfg.context_length - prompt_tokens
    if asked is None:
        if room < 1:
            raise Refused(400, f"This model's maximum context length is {cfg.context_length} tokens. "
                               f"However, your {where} resulted in {prompt_tokens} tokens. Please reduce "
                               f"the length of the {where}.", "messages")
        count = min(cfg.max_tokens_default, room)
        # Cut short by the context window, the answer ends as a model's would: "length".
        return count, "stop" if count == cfg.max_tokens_default else "length"
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
        raise Refused(400, f"{name} must be a whole number of at least 1, got {asked!r}.", name)
    if asked > room:
        raise Refused(400, f"This model's maximum context length is {cfg.context_length} tokens. However, "
                           f"you requested {prompt_tokens + asked} tokens ({prompt_tokens} in the {where}, "
                           f"{asked} in the completion). Please reduce the length of the {where} or "
                           f"completion.", name)
    # An answer has its own natural length (--max-tokens-default), as a
    # model's does: max_tokens below it cuts the answer ("length"), above it
    # changes nothing ("stop"), so clients that always send max_tokens (as
    # Anthropic's must) still see answers that end by themselves.
    if asked >= cfg.max_tokens_default:
        return cfg.max_tokens_default, "stop"
    return asked, "length"


def _thinking(body: dict) -> bool:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and "enable_thinking" in kwargs:
        return bool(kwargs["enable_thinking"])
    effort = body.get("reasoning_effort")
    return isinstance(effort, str) and effort not in ("", "none")


def _chosen_tool(body: dict, messages: list) -> tuple[str, str] | None:
    """The tool a sim answer calls, when it calls one: (name, arguments)."""
    tools = body.get("tools")
    if not tools or not isinstance(tools, list):
        return None
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return None
    # After a tool's result the sim answers in words, so an agent loop ends.
    # A system message after the user's (Claude Code 2.1 sends its
    # environment there) is context for the user's turn, not a turn.
    last = next((m for m in reversed(messages) if not (isinstance(m, dict) and m.get("role") == "system")), None)
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    functions = [f for t in tools if isinstance(t, dict) and isinstance(f := t.get("function"), dict)]
    if not functions:
        raise Refused(400, "tools must be a list of {\"type\": \"function\", \"function\": {\"name\": …}}.", "tools")
    # An agent offers dozens of tools and the first is often one that
    # starts more work (Claude Code's Agent spawns a sub-agent): a prompt
    # that names a tool gets that one, so a test can steer a real client's
    # turn to a tool that is safe to run.
    chosen = _named_in(functions, last.get("content")) or functions[0]
    if isinstance(choice, dict):
        function = choice.get("function")
        wanted = function.get("name") if isinstance(function, dict) else None
        named = next((f for f in functions if f.get("name") == wanted), None)
        if named is None:
            raise Refused(400, f"tool_choice names the tool {wanted!r}, which is not among the tools given.",
                          "tool_choice")
        chosen = named
    name = chosen.get("name")
    if not isinstance(name, str) or not name:
        raise Refused(400, "Every tool needs a function name.", "tools")
    return name, tokens.tool_arguments(chosen.get("parameters"))


def _named_in(functions: list[dict], content: object) -> dict | None:
    """The function whose name the user's message holds, the longest name first (`read` inside `read_file`)."""
    text = tokens.message_text(content)
    if not text:
        return None
    named = [f for f in functions if isinstance(f.get("name"), str) and f["name"] and f["name"] in text]
    return max(named, key=lambda f: len(f["name"]), default=None)


def chat_plan(body: dict, cfg: SimConfig) -> ChatPlan:
    check_model(body, cfg)
    check_fail_words(body, cfg)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages is required: a list of at least one {\"role\": …, \"content\": …}.",
                      "messages")
    if not all(isinstance(m, dict) for m in messages):
        raise Refused(400, "Every message must be an object with a role and a content.", "messages")
    stream = _flag(body, "stream")
    include_usage = _include_usage(body, stream)
    prompt = tokens.estimate_tokens(tokens.message_chars(messages))
    count, finish = _length(body, cfg, prompt, "messages")
    reasoning = tokens.reasoning_split(count) if _thinking(body) else 0
    tool = _chosen_tool(body, messages)
    if tool is not None:
        return ChatPlan(stream, include_usage, prompt, reasoning, 0, "tool_calls", tool[0], tool[1])
    if cfg.guard_words:
        words = tokens.guard_words(messages, cfg.guard_words)
        return ChatPlan(stream, include_usage, prompt, 0, len(words), "stop", echo=words)
    if cfg.echo:
        words = tokens.echo_words(messages)
        return ChatPlan(stream, include_usage, prompt, 0, len(words), "stop", echo=words)
    return ChatPlan(stream, include_usage, prompt, reasoning, count - reasoning, finish)


def _prompt_list(value: object, name: str) -> list[str | list[int]]:
    """A prompt or input as a list of items: strings or token lists."""
    bad = Refused(400, f"{name} must be a string, a list of strings, a list of token ids "
                       f"or a list of such lists.", name)
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        raise bad
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [value]
    items: list[str | list[int]] = []
    for v in value:
        token_ids = isinstance(v, list) and v and all(isinstance(t, int) and not isinstance(t, bool) for t in v)
        if isinstance(v, str) or token_ids:
            items.append(v)
        else:
            raise bad
    return items


def _item_tokens(item: str | list[int]) -> int:
    return tokens.estimate_tokens(len(item)) if isinstance(item, str) else len(item)


def completion_plan(body: dict, cfg: SimConfig) -> CompletionPlan:
    check_model(body, cfg)
    check_fail_words(body, cfg)
    if "prompt" not in body:
        raise Refused(400, "prompt is required: a string or a list of strings.", "prompt")
    prompts = [_item_tokens(p) for p in _prompt_list(body["prompt"], "prompt")]
    stream = _flag(body, "stream")
    include_usage = _include_usage(body, stream)
    count, finish = _length(body, cfg, max(prompts), "prompt")
    return CompletionPlan(stream, include_usage, prompts, count, finish)


def embedding_plan(body: dict, cfg: SimConfig) -> EmbeddingPlan:
    from llmgw.sim import embed

    check_model(body, cfg)
    if "input" not in body:
        raise Refused(400, "input is required: a string or a list of strings.", "input")
    items = _prompt_list(body["input"], "input")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise Refused(400, f"encoding_format must be \"float\" or \"base64\", got {fmt!r}.", "encoding_format")
    dims = body.get("dimensions")
    if dims is None:
        dims = embed.DIMENSIONS
    elif isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= embed.DIMENSIONS:
        raise Refused(400, f"dimensions must be between 1 and {embed.DIMENSIONS}, got {dims!r}.", "dimensions")
    return EmbeddingPlan([embed.key_of(i) for i in items], sum(_item_tokens(i) for i in items),
                         fmt == "base64", dims)


@dataclass(slots=True)
class SemanticPlan:
    texts: list[str]
    prompt_tokens: int
    base64: bool
    dimensions: int


def semantic_plan(body: dict, cfg: SimConfig, model_dimensions: int) -> SemanticPlan:
    """An embeddings request for a real model (--embedding-model): texts only, up to its dimensions."""
    check_model(body, cfg)
    if "input" not in body:
        raise Refused(400, "input is required: a string or a list of strings.", "input")
    items = _prompt_list(body["input"], "input")
    texts = [i for i in items if isinstance(i, str)]
    if len(texts) < len(items):
        raise Refused(400, "This sim-engine's embedding model (--embedding-model) reads text; send input as "
                           "strings, not token ids.", "input")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise Refused(400, f"encoding_format must be \"float\" or \"base64\", got {fmt!r}.", "encoding_format")
    dims = body.get("dimensions")
    if dims is None:
        dims = model_dimensions
    elif isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= model_dimensions:
        raise Refused(400, f"dimensions must be between 1 and {model_dimensions}, got {dims!r}.", "dimensions")
    return SemanticPlan(texts, sum(_item_tokens(t) for t in texts), fmt == "base64", dims)
