"""Translations between the client APIs and the engines' chat completions.

The engines (vLLM, llama.cpp, SGLang) speak only OpenAI's Chat Completions.
`anthropic` turns Anthropic's Messages API into it and back, `responses`
OpenAI's Responses API. Pure functions and stream state, no I/O: the
handlers read and write, these only reshape. A request that cannot be
reshaped raises `TranslateError` with a sentence for the client.
"""

from llmgw.router.translate.common import TranslateError, encode_sse

__all__ = ["TranslateError", "encode_sse"]
