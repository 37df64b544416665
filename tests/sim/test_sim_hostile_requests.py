"""The sim reads any JSON a client sends: a plan to answer, or a 400 that says why, never an exception."""

from __future__ import annotations

import random

import orjson
import pytest

from llmgw.benchmark.fuzzcases import CHAT, COMPLETIONS, EMBEDDINGS, dumps, mutate
from llmgw.sim import plans
from llmgw.sim.config import SimConfig


@pytest.mark.parametrize("make, seed", [(plans.chat_plan, CHAT), (plans.completion_plan, COMPLETIONS),
                                        (plans.embedding_plan, EMBEDDINGS)], ids=["chat", "completions",
                                                                                 "embeddings"])
def test_every_mutated_request_is_planned_or_refused_with_a_4xx(make, seed):
    cfg = SimConfig(model="sim")
    rng = random.Random(12)
    for i in range(1500):
        doc = seed
        for _ in range(rng.choice([1, 2, 3])):
            doc, what = mutate(doc, rng)
        try:
            body = orjson.loads(dumps(doc))
        except orjson.JSONDecodeError:
            continue  # the engine's JSON reader refuses it with 400 before a plan is made
        if not isinstance(body, dict):
            continue
        try:
            make(body, cfg)
        except plans.Refused as refused:
            assert 400 <= refused.status < 500, (i, what)


def test_a_tool_schema_type_that_is_an_object_or_a_list_of_lists_gets_a_plain_example():
    schema = {"required": ["a", "b", "c"],
              "properties": {"a": {"type": {"x": 1}}, "b": {"type": [["string"]]}, "c": {"type": "integer"}}}
    body = dict(CHAT, tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])
    plan = plans.chat_plan(body, SimConfig(model="sim"))
    assert plan.tool_name == "f"
    assert orjson.loads(plan.tool_arguments) == {"a": "x", "b": None, "c": 1}
