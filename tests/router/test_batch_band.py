"""A batch's lines wait in the lowest band, so a person's request is let in before them when a model is full."""

from __future__ import annotations

import asyncio

from llmgw.config.router import AdmissionSettings, Band
from llmgw.router.admission import Admission
from llmgw.router.batches.runner import lowest_band


def test_batch_lines_take_the_band_of_lowest_priority_whatever_it_is_called():
    assert lowest_band(AdmissionSettings()) == "batch"
    custom = AdmissionSettings(default_band="gold", bands=[Band("gold", 300), Band("overnight", -5), Band("bulk", 10)])
    assert lowest_band(custom) == "overnight"


async def test_with_the_model_full_a_persons_request_goes_in_before_batch_lines_already_waiting():
    settings = AdmissionSettings(saturation=1)
    admission = Admission(settings)
    in_flight = 1  # the one replica is busy with a batch line
    let_in: list[str] = []

    def full() -> bool:
        return in_flight >= settings.saturation

    async def request(label: str, band: str | None):
        nonlocal in_flight
        ticket = await admission.enter("qwen", band, full)
        in_flight += 1  # counted before the next await, as the proxy does
        let_in.append(label)
        return ticket

    lines = [asyncio.create_task(request(f"line {n}", lowest_band(settings))) for n in range(3)]
    await asyncio.sleep(0)
    person = asyncio.create_task(request("person", settings.default_band))
    await asyncio.sleep(0)
    assert let_in == []  # all four wait: the model is full

    in_flight -= 1
    admission.release("qwen")  # the running line ended
    ticket = await person
    assert let_in == ["person"]

    in_flight -= 1
    ticket.release()
    await asyncio.wait_for(lines[0], 5)
    assert let_in == ["person", "line 0"]
    for task in lines[1:]:
        task.cancel()
    await asyncio.gather(*lines[1:], return_exceptions=True)
