"""A replica that keeps failing is passed over, and let back in by one trial."""

from __future__ import annotations

import pytest

from llmgw.router.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def tripped(clock, failures=3, open_for=30.0) -> Breaker:
    breaker = Breaker(failures, open_for, clock=clock)
    for _ in range(failures):
        breaker.failure("connection refused")
    return breaker


def test_a_replica_opens_after_its_failures_in_a_row_and_not_before(clock):
    breaker = Breaker(3, 30.0, clock=clock)
    breaker.failure("502")
    breaker.failure("502")
    assert breaker.state == "closed" and breaker.allow()
    breaker.failure("connection refused")
    assert breaker.state == "open"
    assert not breaker.allow()
    assert breaker.last_reason == "connection refused"


def test_a_success_between_failures_starts_the_count_again(clock):
    breaker = Breaker(3, 30.0, clock=clock)
    for _ in range(5):
        breaker.failure("502")
        breaker.failure("502")
        breaker.success()
    assert breaker.state == "closed"


def test_an_open_breaker_lets_exactly_one_trial_through_once_its_time_is_up(clock):
    breaker = tripped(clock)
    clock.now += 29.9
    assert not breaker.available() and not breaker.allow()
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert breaker.available()  # offered, nothing taken
    assert breaker.available()
    assert breaker.allow()
    assert not breaker.allow(), "a second request went through while the trial was out"
    assert not breaker.available()


def test_a_trial_that_succeeds_closes_the_breaker(clock):
    breaker = tripped(clock)
    clock.now += 30
    assert breaker.allow()
    breaker.success()
    assert breaker.state == "closed"
    assert all(breaker.allow() for _ in range(10))


def test_a_trial_that_fails_passes_the_replica_over_for_another_period(clock):
    breaker = tripped(clock)
    clock.now += 30
    assert breaker.allow()
    breaker.failure("503")
    assert breaker.state == "open"
    clock.now += 29
    assert not breaker.allow()
    clock.now += 1
    assert breaker.allow()


def test_a_trial_whose_client_went_away_hands_the_trial_to_the_next_request(clock):
    breaker = tripped(clock)
    clock.now += 30
    assert breaker.allow()
    breaker.abandon()
    assert breaker.state == "half_open"
    assert breaker.allow()


def test_a_trial_never_heard_of_again_does_not_keep_the_replica_out_for_ever(clock):
    breaker = tripped(clock)
    clock.now += 30
    assert breaker.allow()
    clock.now += 29
    assert not breaker.allow()
    clock.now += 1
    assert breaker.allow()


def test_failures_of_requests_already_on_their_way_do_not_lengthen_the_open_period(clock):
    breaker = tripped(clock)
    clock.now += 20
    breaker.failure("502")
    breaker.success()  # a late success neither closes it early
    assert breaker.state == "open"
    clock.now += 10
    assert breaker.state == "half_open"


def test_new_settings_take_effect_on_a_breaker_already_open(clock):
    breaker = tripped(clock, open_for=60.0)
    clock.now += 10
    breaker.configure(failures=3, open_for=10.0)
    assert breaker.allow()
    breaker.success()
    breaker.configure(failures=1, open_for=10.0)
    breaker.failure("401")
    assert breaker.state == "open"


def test_a_tripped_breaker_is_open_at_once_whatever_the_count():
    from llmgw.router.breaker import Breaker

    breaker = Breaker(failures=5, open_for=30)
    breaker.trip("answered 429")
    assert breaker.state == "open" and not breaker.available()
    assert breaker.last_reason == "answered 429"


def test_failed_answers_from_one_key_never_open_it_but_ask_for_a_health_check(clock):
    breaker = Breaker(3, 30.0, distinct_keys=2, clock=clock)
    asks = [breaker.failure("answered 500", "key-a") for _ in range(9)]
    assert breaker.state == "closed" and breaker.allow()
    # At the count, and again every `failures` failures while only one key stands behind them.
    assert asks == [False, False, True, False, False, True, False, False, True]


def test_failed_answers_from_two_keys_in_a_row_open_it(clock):
    breaker = Breaker(3, 30.0, distinct_keys=2, clock=clock)
    breaker.failure("answered 500", "key-a")
    breaker.failure("answered 500", "key-a")
    assert breaker.failure("answered 500", "key-b") is False
    assert breaker.state == "open" and breaker.last_reason == "answered 500"


def test_a_success_forgets_the_keys_that_failed_before_it(clock):
    breaker = Breaker(3, 30.0, distinct_keys=2, clock=clock)
    breaker.failure("answered 500", "key-b")
    breaker.success()
    for _ in range(3):
        breaker.failure("answered 500", "key-a")
    assert breaker.state == "closed"


def test_an_engine_that_cannot_be_reached_opens_it_whoever_asked(clock):
    breaker = Breaker(3, 30.0, distinct_keys=2, clock=clock)
    breaker.failure("answered 500", "key-a")
    breaker.failure("answered 500", "key-a")
    breaker.failure("connection failed: ClientConnectorError")
    assert breaker.state == "open"


def test_one_distinct_key_counts_every_failed_answer_as_before(clock):
    breaker = Breaker(3, 30.0, distinct_keys=1, clock=clock)
    for _ in range(3):
        breaker.failure("answered 500", "key-a")
    assert breaker.state == "open"


def test_a_failed_trial_reopens_it_whoever_asked(clock):
    breaker = tripped(clock)
    clock.now += 30
    assert breaker.allow()
    breaker.failure("answered 500", "key-a")
    assert breaker.state == "open"


def test_it_says_when_a_request_may_be_let_through_again(clock):
    breaker = Breaker(1, 30.0, clock=clock)
    assert breaker.retry_in() == 0
    breaker.failure("connection refused")
    clock.now += 12
    assert breaker.retry_in() == 18
    clock.now += 18
    assert breaker.retry_in() == 0  # half-open: the trial is there to take
    assert breaker.allow()
    clock.now += 5
    assert breaker.retry_in() == 25  # the trial is out: at the latest when it lapses


def test_it_answers_when_its_open_period_ends_while_it_is_asked():
    # A busy process reads a later time at every look. retry_in() looked three times: open at the first,
    # half-open by the last with no trial out, and then added to a trial time that was None (a TypeError
    # where the replicas_failing refusal works out its Retry-After). One reading answers the whole question.
    readings = iter([1000.0, 1029.9, 1029.95, 1030.0, 1030.05])
    breaker = Breaker(1, 30.0, clock=lambda: next(readings))
    breaker.failure("connection refused")  # opened at 1000.0
    assert breaker.retry_in() == pytest.approx(0.1)
