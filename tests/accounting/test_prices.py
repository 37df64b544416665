"""What a request costs: micro-units, rounded up, cached tokens at their own rate."""

from __future__ import annotations

from llmgw.accounting import cost
from llmgw.config.router import Price


def test_a_single_token_costs_a_micro_unit_so_a_stream_of_tiny_requests_is_not_free():
    price = Price(prompt_per_1k=1000, completion_per_1k=3000)
    assert cost(price, 1, 0, 0) == 1
    assert cost(price, 0, 0, 1) == 3
    assert sum(cost(price, 1, 0, 1) for _ in range(1000)) == 4000  # not 4, not 0


def test_a_thousand_of_each_costs_the_two_prices_and_nothing_costs_nothing():
    price = Price(prompt_per_1k=1000, completion_per_1k=3000)
    assert cost(price, 1000, 0, 1000) == 4000
    assert cost(price, 0, 0, 0) == 0


def test_a_cached_prompt_is_charged_at_the_cached_rate():
    price = Price(prompt_per_1k=1000, cached_per_1k=100, completion_per_1k=3000)
    # 10,000 prompt tokens of which 9,000 came from the cache.
    assert cost(price, 10_000, 9_000, 0) == 1000 + 900


def test_more_cached_tokens_than_prompt_tokens_is_a_miscount_not_a_refund():
    price = Price(prompt_per_1k=1000, cached_per_1k=100)
    assert cost(price, 100, 500, 0) == 10
    assert cost(price, 100, -5, 0) == 100


def test_without_a_cached_rate_cached_tokens_cost_what_any_prompt_token_does():
    assert cost(Price(prompt_per_1k=1000), 10_000, 9_000, 0) == 10_000


def test_pictures_and_meshes_cost_their_price_on_top_of_their_prompt():
    price = Price(prompt_per_1k=1000, per_image=50_000, per_mesh=2_000_000)
    assert cost(price, 20, 0, 0, images=3) == 20 + 150_000
    assert cost(price, 0, 0, 0, meshes=2) == 4_000_000


def test_money_stays_a_whole_number_however_large():
    price = Price(prompt_per_1k=7, completion_per_1k=13)
    got = cost(price, 10**12, 3, 10**12 + 1)
    assert isinstance(got, int) and got == 7 * 10**9 + 13 * 10**9 + 1
