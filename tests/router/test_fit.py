"""A max_tokens the context cannot hold is lowered to the room the prompt leaves, with a margin for the estimate."""

from __future__ import annotations

from llmgw.router.fit import fit_max_tokens

PROMPT = {"messages": [{"role": "user", "content": "x" * 4000}]}  # about 1000 tokens by the router's estimate


def test_a_max_tokens_that_fits_is_sent_as_asked():
    body = {**PROMPT, "max_tokens": 2000}
    assert fit_max_tokens(body, "chat", 4096) == (body, None)


def test_one_that_does_not_fit_is_lowered_leaving_a_quarter_of_the_prompt_for_the_estimates_error():
    body = {**PROMPT, "max_completion_tokens": 32000}

    sent, lowered = fit_max_tokens(body, "chat", 4096)

    assert lowered == (32000, 4096 - 1000 - 250) and sent["max_completion_tokens"] == lowered[1]
    assert body["max_completion_tokens"] == 32000  # the client's own body is left as it came


def test_nothing_changes_when_the_context_is_not_known_or_the_prompt_fills_it():
    body = {**PROMPT, "max_tokens": 32000}
    assert fit_max_tokens(body, "chat", 0) == (body, None)
    assert fit_max_tokens(body, "chat", 900) == (body, None)
    # Past the margin but inside the context: the room without the margin.
    assert fit_max_tokens(body, "chat", 1100)[1] == (32000, 1100 - 1000)
