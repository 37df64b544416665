"""When every replica is full, requests wait their turn by band, and are told when to come back."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.config.router import AdmissionSettings, Band
from llmgw.config.types import Duration
from llmgw.router.admission import RETRY_MAX, Admission, AdmissionTimeout


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


class Model:
    """What the proxy keeps for a model: its requests in flight, and whether that is full."""

    def __init__(self, admission: Admission, room: int) -> None:
        self.admission = admission
        self.room = room
        self.in_flight = 0
        self.let_in: list[str] = []
        self.tickets = []

    def full(self) -> bool:
        return self.in_flight >= self.room

    async def request(self, label: str, band: str | None):
        ticket = await self.admission.enter("llama", band, self.full)
        self.in_flight += 1  # counted before the next await, as the proxy does
        self.let_in.append(label)
        self.tickets.append(ticket)
        return ticket

    def end_one(self) -> None:
        self.in_flight -= 1
        self.tickets.pop(0).release()


def settings(**kw) -> AdmissionSettings:
    kw.setdefault("saturation", 4)
    return AdmissionSettings(**kw)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def admission(clock):
    return Admission(settings(), clock=clock)


async def test_a_request_with_room_goes_in_at_once(admission):
    model = Model(admission, room=2)
    ticket = await model.request("a", "standard")
    assert ticket.waited == 0 and model.let_in == ["a"]


async def test_with_admission_off_nobody_waits_however_full(clock):
    model = Model(Admission(settings(saturation=0), clock=clock), room=0)
    await model.request("a", "batch")
    assert model.let_in == ["a"]


async def test_a_full_model_holds_a_request_until_one_ends(admission):
    model = Model(admission, room=1)
    await model.request("first", "standard")
    second = asyncio.ensure_future(model.request("second", "standard"))
    await settle()
    assert not second.done() and admission.waiting("llama")["standard"] == 1
    model.end_one()
    await second
    assert model.let_in == ["first", "second"] and admission.waiting("llama")["standard"] == 0


async def test_a_higher_band_is_let_in_before_a_lower_one_that_waited_longer(admission, clock):
    model = Model(admission, room=1)
    await model.request("running", "standard")
    waiters = [asyncio.ensure_future(model.request("batch job", "batch"))]
    await settle()
    clock.now += 5
    waiters.append(asyncio.ensure_future(model.request("person", "interactive")))
    await settle()
    model.end_one()
    await settle()
    assert model.let_in == ["running", "person"]
    model.end_one()
    await asyncio.gather(*waiters)
    assert model.let_in == ["running", "person", "batch job"]


async def test_requests_of_one_band_go_in_in_the_order_they_came(admission):
    model = Model(admission, room=1)
    await model.request("running", "standard")
    waiters = []
    for label in ("one", "two", "three"):
        waiters.append(asyncio.ensure_future(model.request(label, "standard")))
        await settle()
    for _ in range(3):
        model.end_one()
        await settle()
    await asyncio.gather(*waiters)
    assert model.let_in == ["running", "one", "two", "three"]


async def test_a_newcomer_does_not_pass_those_of_its_band_already_waiting(admission):
    model = Model(admission, room=1)
    await model.request("running", "standard")
    waiting = asyncio.ensure_future(model.request("waiting", "standard"))
    await settle()
    model.in_flight -= 1  # room comes without a release (a replica added, say)
    newcomer = asyncio.ensure_future(model.request("newcomer", "standard"))
    await settle()
    assert model.let_in == ["running", "waiting"] and waiting.done() and not newcomer.done()
    newcomer.cancel()
    await settle()


async def test_a_higher_band_arriving_with_room_goes_past_lower_ones_waiting(admission):
    model = Model(admission, room=1)
    await model.request("running", "standard")
    batch = asyncio.ensure_future(model.request("batch job", "batch"))
    await settle()
    model.in_flight -= 1
    await model.request("person", "interactive")
    assert model.let_in == ["running", "person"]
    batch.cancel()
    await settle()


async def test_one_request_ending_lets_one_waiter_in_not_all(admission):
    model = Model(admission, room=2)
    await model.request("a", None)
    await model.request("b", None)
    waiters = [asyncio.ensure_future(model.request(f"w{i}", None)) for i in range(4)]
    await settle()
    model.end_one()
    await settle()
    assert model.let_in == ["a", "b", "w0"] and model.in_flight == 2
    assert admission.waiting("llama")["standard"] == 3
    for w in waiters[1:]:
        w.cancel()
    await settle()


async def test_a_request_that_waited_past_its_band_ttl_is_refused_with_when_to_retry(clock):
    admission = Admission(settings(bands=[Band("standard", 50, Duration("50ms"))]), clock=clock)
    model = Model(admission, room=1)
    await model.request("running", "standard")
    waiter = asyncio.ensure_future(model.request("late", "standard"))
    await settle()
    clock.now += 12
    with pytest.raises(AdmissionTimeout) as refused:
        await waiter
    assert refused.value.waited == 12
    assert 1 <= refused.value.retry_after <= RETRY_MAX
    assert "busy" in str(refused.value) and "try again in" in str(refused.value)
    assert admission.waiting("llama")["standard"] == 0
    assert model.let_in == ["running"]


async def test_the_time_to_retry_follows_how_fast_requests_are_ending(admission, clock):
    for _ in range(30):  # one ending every two seconds
        clock.now += 2
        admission.release("llama")
    assert admission.retry_after("llama", ahead=3) == 8
    assert admission.retry_after("a model nothing has ended for") == RETRY_MAX


async def test_a_band_without_its_own_ttl_waits_the_default(clock):
    admission = Admission(settings(queue_ttl=Duration("50ms"), bands=[Band("standard", 50)]), clock=clock)
    model = Model(admission, room=0)
    with pytest.raises(AdmissionTimeout):
        await model.request("x", "standard")


async def test_a_client_that_goes_away_leaves_the_queue(admission):
    model = Model(admission, room=1)
    await model.request("running", "standard")
    gone = asyncio.ensure_future(model.request("gone", "standard"))
    stays = asyncio.ensure_future(model.request("stays", "standard"))
    await settle()
    gone.cancel()
    await settle()
    assert admission.waiting("llama")["standard"] == 1
    model.end_one()
    await stays
    assert model.let_in == ["running", "stays"]


async def test_a_client_that_goes_away_just_as_it_is_let_in_passes_its_turn_on(admission):
    model = Model(admission, room=1)
    await model.request("running", "standard")
    unlucky = asyncio.ensure_future(model.request("unlucky", "standard"))
    await settle()
    following = asyncio.ensure_future(model.request("following", "standard"))
    await settle()
    model.in_flight -= 1
    admission.release("llama")
    await asyncio.sleep(0)  # the drain runs and lets "unlucky" in ...
    unlucky.cancel()  # ... and its client is gone before it runs
    await settle()
    await following
    assert model.let_in == ["running", "following"]


async def test_an_unknown_band_waits_in_the_default_one(admission):
    model = Model(admission, room=0)
    waiter = asyncio.ensure_future(model.request("x", "platinum"))
    await settle()
    assert admission.waiting("llama") == {"interactive": 0, "standard": 1, "batch": 0}
    waiter.cancel()
    await settle()


async def test_turning_admission_off_lets_everyone_waiting_in(admission):
    model = Model(admission, room=0)
    waiters = [asyncio.ensure_future(model.request(str(i), "batch")) for i in range(3)]
    await settle()
    admission.configure(settings(saturation=0))
    await asyncio.gather(*waiters)
    assert model.let_in == ["0", "1", "2"]


async def test_new_band_priorities_reorder_those_already_waiting(admission):
    model = Model(admission, room=1)
    await model.request("running", "standard")
    waiters = [asyncio.ensure_future(model.request("people", "interactive"))]
    await settle()
    waiters.append(asyncio.ensure_future(model.request("import", "batch")))
    await settle()
    admission.configure(settings(bands=[Band("interactive", 10), Band("standard", 50), Band("batch", 90)]))
    model.end_one()
    await settle()
    assert model.let_in == ["running", "import"]
    for w in waiters:
        w.cancel()
    await settle()


async def test_a_ticket_released_twice_wakes_only_one_waiter(admission):
    model = Model(admission, room=1)
    ticket = await model.request("running", "standard")
    waiters = [asyncio.ensure_future(model.request(str(i), "standard")) for i in range(2)]
    await settle()
    model.in_flight -= 1
    with ticket:
        pass
    ticket.release()
    await settle()
    assert model.let_in == ["running", "0"]
    for w in waiters:
        w.cancel()
    await settle()
