"""What a request costs, in whole micro-units of the site's currency."""

from __future__ import annotations

from llmgw.config import Price


def _div_up(n: int, d: int) -> int:
    return -(-n // d)


def cost(price: Price, prompt_tokens: int, cached_tokens: int, completion_tokens: int,
         images: int = 0, meshes: int = 0) -> int:
    """The request's cost in micro-units, rounded UP to a whole micro-unit.

    Up, not to nearest: rounding down would make a stream of one-token
    requests free, which is exactly the traffic a budget exists to bound.

    `cached_tokens` are part of `prompt_tokens` (as OpenAI's usage counts
    them) and are charged at `cached_per_1k` instead (0 means the prompt
    rate). An engine reporting more cached tokens than prompt tokens has
    miscounted; that is clamped to the prompt, never paid back as a refund.
    """
    prompt = max(prompt_tokens, 0)
    cached = min(max(cached_tokens, 0), prompt)
    cached_rate = price.cached_per_1k or price.prompt_per_1k
    # One rounding for the whole prompt, not one for each part: 1 uncached and
    # 1 cached token at 1000 a thousand is 2/1000 of a unit, one micro-unit up.
    prompt_cost = _div_up((prompt - cached) * price.prompt_per_1k + cached * cached_rate, 1000)
    completion_cost = _div_up(max(completion_tokens, 0) * price.completion_per_1k, 1000)
    return (prompt_cost + completion_cost
            + max(images, 0) * price.per_image + max(meshes, 0) * price.per_mesh)


def batch_cost(price: Price, spent: int) -> int:
    """What a batch's line costs: `spent` less the model's batch_discount percent, rounded up as cost() is."""
    return _div_up(max(spent, 0) * (100 - price.batch_discount), 100)
