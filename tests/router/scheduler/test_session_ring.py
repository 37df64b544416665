"""A conversation keeps landing on the same replica, and a change of replicas moves few."""

from __future__ import annotations

from collections import Counter

from routing_endpoints import NOW, replica, replicas

from llmgw.router.breaker import Breaker
from llmgw.router.scheduler import choose
from llmgw.router.scheduler.ring import Ring

SESSIONS = [f"conversation-{i}" for i in range(4000)]


def owners(endpoints, keys=SESSIONS) -> dict[str, str]:
    return {key: choose(endpoints, "chat", key, now=NOW)[0].id for key in keys}


def test_a_conversation_stays_on_its_replica():
    endpoints = replicas(4, ttft=0.2)
    first = choose(endpoints, "chat", "conversation-7", now=NOW)[0]
    # Other requests come and go meanwhile; turns of the conversation still land there.
    for i in range(20):
        endpoints[i % 4].in_flight = i % 3
        assert choose(endpoints, "chat", "conversation-7", now=NOW)[0] is first


def test_sessions_are_spread_over_the_replicas():
    shares = Counter(owners(replicas(4)).values())
    assert len(shares) == 4
    assert all(750 < n < 1250 for n in shares.values()), shares


def test_adding_a_replica_moves_only_a_fraction_of_sessions():
    before = owners(replicas(4))
    grown = replicas(5)
    after = owners(grown)
    moved = [key for key in SESSIONS if before[key] != after[key]]
    assert len(moved) < len(SESSIONS) * 0.3  # about 1/5; a modulus would move 4/5
    assert {after[key] for key in moved} == {grown[4].id}, "a session moved between two old replicas"


def test_removing_a_replica_moves_only_its_own_sessions():
    endpoints = replicas(5)
    before = owners(endpoints)
    gone = endpoints.pop(2)
    after = owners(endpoints)
    assert all(after[key] == before[key] for key in SESSIONS if before[key] != gone.id)


def test_a_replica_of_twice_the_weight_holds_about_twice_the_sessions():
    endpoints = [replica(1, weight=2.0), replica(2), replica(3)]
    shares = Counter(owners(endpoints).values())
    assert 1.5 < shares[endpoints[0].id] / shares[endpoints[1].id] < 2.6, shares


def test_every_router_puts_a_session_on_the_same_replica_whatever_order_it_lists_them():
    members = [(f"http://10.0.0.{i}:8000/v1", 1.0) for i in range(6)]
    one, other = Ring(members), Ring(list(reversed(members)))
    assert all(one.owner(key) == other.owner(key) for key in SESSIONS[:500])


def test_while_its_replica_is_out_a_session_keeps_to_one_other_replica():
    clock = [NOW]
    endpoints = replicas(4)
    for e in endpoints:
        e.breaker = Breaker(1, 30.0, clock=lambda: clock[0])
    home = choose(endpoints, "chat", "conversation-3", now=NOW)[0]
    home.breaker.failure("connection refused")
    stand_ins = set()
    for i in range(12):
        endpoints[i % 4].in_flight = i % 2  # the others' queues move; the stand-in does not
        stand_ins.add(choose(endpoints, "chat", "conversation-3", now=NOW)[0].id)
    assert len(stand_ins) == 1 and home.id not in stand_ins


def test_a_session_leaves_a_replica_far_busier_than_the_least_busy():
    endpoints = replicas(3)
    home = choose(endpoints, "chat", "conversation-1", now=NOW)[0]
    home.in_flight = 3  # a little busier: the cached prefix is worth more
    assert choose(endpoints, "chat", "conversation-1", now=NOW)[0] is home
    home.in_flight = 9
    assert choose(endpoints, "chat", "conversation-1", now=NOW)[0] is not home


def test_a_session_does_not_leave_for_a_difference_that_is_small_beside_the_queues():
    endpoints = replicas(3, running=100, read_at=NOW)
    home = choose(endpoints, "chat", "conversation-1", now=NOW)[0]
    home.load.running = 130  # 30 more than the others, but not half as many again
    assert choose(endpoints, "chat", "conversation-1", now=NOW)[0] is home
