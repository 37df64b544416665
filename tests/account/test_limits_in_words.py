"""A level's limits in the words `ctl keys`, `ctl tree` and the console's People screen all show."""

from llmgw.account.limits import describe


def test_each_limit_set_is_one_part_in_the_order_people_read_them():
    limits = {"rpm": 60, "tpm": 20000, "budget": "25.00", "period": "day", "models": ["qwen", "sim"]}
    assert describe(limits) == ["60 requests/min", "20000 tokens/min", "budget 25.00 a day", "models qwen, sim"]


def test_a_budget_without_a_period_is_monthly_and_an_empty_model_list_allows_none():
    assert describe({"budget": "5.00", "models": []}) == ["budget 5.00 a month", "models none"]


def test_a_level_with_no_limits_of_its_own_has_no_parts():
    assert describe(None) == [] and describe({"rpm": None}) == []
