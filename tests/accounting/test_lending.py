"""Worker processes borrow their right to admit from the main process: a burst over them is held to the limit.

The worker processes and the main process are played here by limiters in
one event loop, joined by messages delivered on the loop's next turns as a
socket would deliver them; tests/integration/test_rate_limits.py does the
same with a real `llmgw server --workers 2`.
"""

from __future__ import annotations

import asyncio

from llmgw.accounting import RateLimiter, lending
from llmgw.accounting.lending import Borrower, Lender

from .principals import offline


class Machine:
    """A main process and `n` workers, their messages passed on the loop's next turn."""

    def __init__(self, n: int, answers: bool = True) -> None:
        self.main = RateLimiter()
        self.lender = Lender(self.main, n)
        self.workers: list[RateLimiter] = []
        self.asked = 0
        for i in range(n):
            limiter = RateLimiter(share=True)
            limiter.borrower = Borrower(self._sender(i) if answers else (lambda levels: None))
            self.workers.append(limiter)

    def _sender(self, i: int):
        loop = asyncio.get_running_loop()

        def send(levels: list) -> None:
            self.asked += 1
            loop.call_soon(lambda: self.workers[i].borrower.answered(self.lender.lend(i, levels)))

        return send

    def report(self) -> None:
        """Every worker's 100 ms report: its counts and idle loans to the main process, and on to the others."""
        for i, limiter in enumerate(self.workers):
            counts = limiter.snapshot()
            self.lender.returned(i, limiter.borrower.idle())
            self.main.merge(counts)
            self.lender.spent(i, counts)
            for j, other in enumerate(self.workers):
                if j != i:
                    other.merge(counts)


async def request(limiter: RateLimiter, key) -> bool:
    """What the client API does with a request: check, then claim."""
    return (limiter.check(key) or await limiter.claim(key)) is None


async def test_a_burst_spread_over_two_workers_is_held_to_the_limit_not_the_limit_per_worker():
    key = offline(key={"rpm": 60})
    machine = Machine(2)
    # 200 at once, 100 on each worker, before any report: sharing counts alone let 120 through.
    answers = await asyncio.gather(*(request(machine.workers[i % 2], key) for i in range(200)))

    assert sum(answers) == 60
    refused = machine.workers[0].check(key) or await machine.workers[0].claim(key)
    assert refused.message == "the key demo allows 60 requests a minute" and refused.retry_after >= 1
    print(f"200 at once over 2 workers: {sum(answers)} admitted, {machine.asked} loans asked for")


async def test_every_limited_level_of_a_chain_is_lent_and_the_tightest_decides():
    alice = offline(name="alice", team={"rpm": 10}, key={"rpm": 100})
    bob = offline(name="bob", team={"rpm": 10})
    machine = Machine(4)
    answers = await asyncio.gather(*(request(machine.workers[i % 4], (alice, bob)[i % 2]) for i in range(40)))
    assert sum(answers) == 10
    refused = await machine.workers[1].claim(bob)
    assert refused.message == "the team Acme/ml allows 10 requests a minute"


async def test_a_busy_worker_spends_its_loans_without_asking_for_every_request():
    key = offline(key={"rpm": 10_000})
    machine = Machine(2)
    for _ in range(1000):
        assert await request(machine.workers[0], key)
    # Each loan is a quarter of what is left: a thousand requests take a handful of questions.
    assert machine.asked <= 10, machine.asked


async def test_a_loan_one_worker_does_not_use_goes_back_to_the_minute(monkeypatch):
    key = offline(key={"rpm": 8})
    machine = Machine(2)
    assert await request(machine.workers[0], key)  # lent 2 (a quarter of 8), spent 1
    machine.report()
    # Worker 0 went quiet holding one; worker 1 has the six neither counted nor lent.
    answers = [await request(machine.workers[1], key) for _ in range(8)]
    assert sum(answers) == 6
    monkeypatch.setattr(lending, "RETURN_AFTER", 0.0)
    machine.report()  # worker 0 gives back what it did not use
    assert await request(machine.workers[1], key)
    assert not await request(machine.workers[1], key)
    machine.report()
    assert machine.main.used("key", "key_demo")[0] == 8 and machine.lender.lent(("key", "key_demo")) == 0


async def test_a_worker_that_exits_gives_back_what_it_had_not_spent():
    key = offline(key={"rpm": 8})
    machine = Machine(2)
    assert await request(machine.workers[0], key)  # lent 2 (a quarter of 8), spent 1
    machine.report()
    assert machine.lender.lent(("key", "key_demo")) == 1
    machine.lender.forget(0)
    assert machine.lender.lent(("key", "key_demo")) == 0
    assert machine.main.used("key", "key_demo")[0] == 1


async def test_a_worker_whose_main_process_does_not_answer_decides_alone_rather_than_hang(monkeypatch, caplog):
    monkeypatch.setattr(lending, "ASK_TIMEOUT", 0.05)
    key = offline(key={"rpm": 2})
    machine = Machine(2, answers=False)
    answers = [await request(machine.workers[0], key) for _ in range(3)]
    assert answers == [True, True, False]  # its own window still holds it to the limit
    assert "did not lend within" in caplog.text


def test_the_lender_lends_nothing_while_the_minute_is_counted_or_lent_and_says_when_it_has_room():
    key = offline(key={"rpm": 3})
    main = RateLimiter()
    lender = Lender(main, 2)
    main.admit(key, 1_800_000_000.5)
    main.admit(key, 1_800_000_010.5)
    assert lender.lend(0, [["key", "key_demo", 3]], 1_800_000_020.0) == [["key", "key_demo", 1, 0]]
    # Two counted, one lent: full until the first count is a minute old.
    assert lender.lend(1, [["key", "key_demo", 3]], 1_800_000_020.0) == [["key", "key_demo", 0, 41]]
    assert lender.lend(1, [["key", "key_demo", 3]], 1_800_000_060.5) == [["key", "key_demo", 1, 0]]
