"""Which replica a request goes to, by profile; and the breaker's trial, taken only when sent."""

from __future__ import annotations

from collections import Counter

import pytest
from routing_endpoints import NOW, replica, replicas

from llmgw.config.router import PROFILES
from llmgw.router.breaker import Breaker
from llmgw.router.endpoint import TTFT_MEMORY
from llmgw.router.scheduler import UnknownProfile, choose, profiles, take


def ids(endpoints) -> list[str]:
    return [e.id[len("http://10.0.0."):].split(":")[0] for e in endpoints]


def test_every_profile_the_settings_accept_is_registered():
    assert set(PROFILES) <= set(profiles())


def test_a_replica_answering_sooner_is_preferred_for_chat():
    slow, fast = replica(1, ttft=0.9), replica(2, ttft=0.2)
    assert all(choose([slow, fast], "chat", None, now=NOW)[0] is fast for _ in range(10))


def test_the_slower_replica_still_gets_some_of_a_burst():
    slow, fast = replica(1, ttft=0.6), replica(2, ttft=0.2)
    sent = Counter()
    for _ in range(12):
        pick = choose([slow, fast], "chat", None, now=NOW)[0]
        pick.in_flight += 1
        sent[pick.id] += 1
    assert sent[fast.id] > sent[slow.id] > 0, sent


def test_a_replica_not_yet_measured_is_tried_before_the_slowest():
    quick, sluggish, new = replica(1, ttft=0.2), replica(2, ttft=1.0), replica(3)
    assert ids(choose([quick, sluggish, new], "chat", None, now=NOW)) == ["1", "3", "2"]


def test_a_replica_not_heard_from_for_five_minutes_has_its_latency_forgotten():
    quick, middling, once_slow = replica(1, ttft=0.2), replica(2, ttft=0.4), replica(3)
    once_slow.observe_ttft(5.0, now=NOW - TTFT_MEMORY - 1)
    assert once_slow.smoothed_ttft(NOW) is None
    # Forgotten, it counts as the median of the others (0.3): ahead of 0.4, not last at 5 s.
    assert ids(choose([quick, middling, once_slow], "chat", None, now=NOW)) == ["1", "3", "2"]


def test_batch_picks_the_shortest_queue():
    endpoints = [replica(1, in_flight=5), replica(2, in_flight=1), replica(3, in_flight=3)]
    assert ids(choose(endpoints, "batch", None, now=NOW)) == ["2", "3", "1"]


def test_batch_counts_what_the_engine_holds_from_other_routers():
    ours, shared = replica(1, in_flight=2), replica(2, in_flight=0, running=6, waiting=4)
    assert choose([shared, ours], "batch", None, now=NOW)[0] is ours


def test_an_engines_counts_not_read_lately_are_not_believed():
    ours, stale = replica(1, in_flight=2), replica(2, in_flight=0, running=50, read_at=NOW - 60)
    assert choose([ours, stale], "batch", None, now=NOW)[0] is stale


def test_a_replica_of_more_weight_is_given_a_longer_queue():
    small, big = replica(1, in_flight=3), replica(2, weight=4.0, in_flight=6)
    assert choose([small, big], "batch", None, now=NOW)[0] is big


def test_long_context_picks_the_most_free_kv_cache():
    endpoints = [replica(1, kv=0.7), replica(2, kv=0.1), replica(3, kv=0.4)]
    assert ids(choose(endpoints, "long-context", None, now=NOW)) == ["2", "3", "1"]


def test_an_engine_that_does_not_say_how_full_its_cache_is_counts_as_half_full():
    endpoints = [replica(1, kv=0.8), replica(2, read=True), replica(3, kv=0.2)]
    assert ids(choose(endpoints, "long-context", None, now=NOW)) == ["3", "2", "1"]


def test_idle_replicas_take_turns_at_requests_that_come_one_at_a_time():
    endpoints = replicas(3)
    firsts = Counter(choose(endpoints, "batch", None, now=NOW)[0].id for _ in range(30))
    assert sorted(firsts.values()) == [10, 10, 10]


def test_the_rest_of_the_list_is_every_other_candidate_for_retries():
    endpoints = replicas(4, ttft=0.3)
    ranked = choose(endpoints, "chat", "conversation-9", now=NOW)
    assert sorted(ids(ranked)) == ["1", "2", "3", "4"]
    retry = choose(endpoints, "chat", "conversation-9", exclude={ranked[0].id}, now=NOW)
    assert ranked[0] not in retry and len(retry) == 3


def test_a_tripped_breaker_passes_the_replica_over_until_one_trial_succeeds():
    clock = [NOW]
    failing, healthy = replica(1), replica(2, in_flight=4)
    for e in (failing, healthy):
        e.breaker = Breaker(2, 30.0, clock=lambda: clock[0])
    failing.breaker.failure("connection refused")
    failing.breaker.failure("connection refused")
    assert choose([failing, healthy], "batch", None, now=NOW) == [healthy]

    clock[0] += 30
    # Half-open: offered (it has the shorter queue), and asking again takes nothing.
    assert choose([failing, healthy], "batch", None, now=NOW)[0] is failing
    assert choose([failing, healthy], "batch", None, now=NOW)[0] is failing
    assert take(failing)  # the one trial
    assert choose([failing, healthy], "batch", None, now=NOW) == [healthy]
    assert not take(failing)

    failing.breaker.success()
    assert choose([failing, healthy], "batch", None, now=NOW)[0] is failing


def test_an_unknown_profile_is_refused_with_the_ones_there_are():
    with pytest.raises(UnknownProfile) as refused:
        choose(replicas(2), "fastest", None)
    assert isinstance(refused.value, ValueError)
    assert str(refused.value) == ("there is no routing profile called 'fastest'; "
                                  "the profiles are batch, chat, long-context, prefix-cache")


def test_a_model_with_no_replica_left_gets_an_empty_list():
    endpoints = replicas(2)
    assert choose(endpoints, "chat", "s", exclude={e.id for e in endpoints}) == []
    assert choose([], "batch", None) == []


def test_a_kv_figure_too_old_to_believe_makes_the_comparison_neutral_and_idle_replicas_take_turns():
    # One engine read just now and nearly empty, the other's last figure too old: neither is favoured.
    fresh, stale = replica(1, kv=0.1), replica(2, kv=0.0, read_at=NOW - 3600)
    firsts = Counter(choose([fresh, stale], "long-context", None, now=NOW)[0].id for _ in range(10))
    assert sorted(firsts.values()) == [5, 5]
