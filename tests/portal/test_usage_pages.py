"""A person's usage page: the chart and tables are their day sums, and the CSV holds their rows only."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections import defaultdict

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.store import Usage
from tests.portal.members import DAY, NOW, Plane, Text, app, seed, sign_in

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
async def world(store):
    world = await seed(store)
    web = world.paths["Acme/eng/web"].project.id
    infra = world.paths["Other/ops/infra"].project.id
    rows = [
        # Ada: today, yesterday, 10 days ago (outside 7 days, inside 30), 40 days ago (outside 30).
        Usage(id="req_a1", at=NOW - 60, key_id="key_a", project_id=web, person_id=world.ada["id"], model="llama",
              prompt_tokens=100, completion_tokens=50, cost_micros=2_000_000),
        Usage(id="req_a2", at=NOW - DAY, key_id="key_a", project_id=web, person_id=world.ada["id"], model="qwen",
              prompt_tokens=10, completion_tokens=5, cost_micros=500_000, status=500),
        Usage(id="req_a3", at=NOW - DAY - 60, key_id="key_a", project_id=web, person_id=world.ada["id"],
              model="llama", prompt_tokens=7, completion_tokens=3, cost_micros=1_000_000),
        Usage(id="req_a4", at=NOW - 10 * DAY, key_id="key_a", project_id=web, person_id=world.ada["id"],
              model="llama", cost_micros=4_000_000),
        Usage(id="req_a5", at=NOW - 40 * DAY, key_id="key_a", project_id=web, person_id=world.ada["id"],
              model="llama", cost_micros=8_000_000),
        # Bob's, today, with a model of his own.
        Usage(id="req_b1", at=NOW - 120, key_id="key_b", project_id=infra, person_id=world.bob["id"],
              model="secret-model", cost_micros=9_000_000),
    ]
    await store.add_usage(rows)
    world.rows = rows
    return world


@pytest.fixture
async def ada(store, world):
    async with TestClient(TestServer(app(Plane(store)))) as client:
        await sign_in(client, "ada@example.com")
        yield client


def chart(page: str) -> ET.Element:
    return ET.fromstring(re.search(r"<svg.*?</svg>", page, re.S).group(0))


def bars_by_model(svg: ET.Element) -> dict[str, int]:
    sums: dict[str, int] = defaultdict(int)
    for rect in svg.iter(f"{SVG}rect"):
        if "bar" in rect.get("class", "").split():
            title = rect.find(f"{SVG}title").text  # "2026-03-15: llama, 2.00"
            sums[title.split(": ", 1)[1].rsplit(", ", 1)[0]] += int(rect.get("data-value"))
    return dict(sums)


async def test_the_bars_and_tables_equal_the_persons_day_sums_over_seven_days(ada, store, world):
    page = await (await ada.get("/usage?days=7")).text()

    assert bars_by_model(chart(page)) == {"llama": 3_000_000, "qwen": 500_000}
    text = Text(page).text
    assert "llama 2 0 107 53 3.00" in text and "qwen 1 1 10 5 0.50" in text
    assert "Total 3 1 117 58 3.50" in text
    assert "secret-model" not in text


async def test_figures_are_written_the_turkish_way_for_a_turkish_reader(ada, world):
    page = await (await ada.get("/usage?days=7", headers={"Accept-Language": "tr-TR,tr;q=0.9"})).text()

    assert '<html lang="tr">' in page
    assert "3,50" in Text(page).text and "3.50" not in Text(page).text


async def test_thirty_days_take_in_the_older_day_and_requests_can_be_charted(ada, world):
    page = await (await ada.get("/usage?days=30&metric=requests")).text()

    assert bars_by_model(chart(page)) == {"llama": 3, "qwen": 1}
    assert "Total 4 1 117 58 7.50" in Text(page).text


@pytest.mark.parametrize("asked", ["5", "x", "365"])
async def test_a_span_other_than_7_30_or_90_days_shows_30(ada, world, asked):
    page = await (await ada.get(f"/usage?days={asked}")).text()

    assert "Total 4 1 117 58 7.50" in Text(page).text


async def test_a_span_with_nothing_used_says_so(store):
    world = await seed(store)
    async with TestClient(TestServer(app(Plane(store)))) as client:
        await sign_in(client, "ada@example.com")
        page = Text(await (await client.get("/usage")).text()).text
    assert "Nothing was used in this span." in page and world


async def test_requests_to_a_model_that_costs_nothing_say_no_spend_and_lead_to_the_requests_view(store):
    # Issue 25: a newcomer's test model has no price, so the default view (spend) had nothing to draw and
    # said "Nothing was used" above a table of the 5 requests it had counted.
    world = await seed(store)
    web = world.paths["Acme/eng/web"].project.id
    await store.add_usage([Usage(id=f"req_{n}", at=NOW - 60 * n, key_id="key_a", project_id=web,
                                 person_id=world.ada["id"], model="free", prompt_tokens=8, completion_tokens=4)
                           for n in range(5)])
    async with TestClient(TestServer(app(Plane(store)))) as client:
        await sign_in(client, "ada@example.com")
        html = await (await client.get("/usage?days=7")).text()
        said = re.search(r'<p class="chart-empty">(.*?)</p>', html, re.S).group(1)
        link = re.search(r'<a href="([^"]+)">', said).group(1).replace("&amp;", "&")
        requests = await (await client.get(link)).text()

    assert Text(said).text == "No spend in this span: the models used cost nothing. Show the requests instead"
    assert "Nothing was used" not in Text(html).text
    assert "free 5 0 40 20 0.00" in Text(html).text
    assert link == "/usage?days=7&metric=requests"
    assert bars_by_model(chart(requests)) == {"free": 5}


async def test_a_span_whose_requests_all_failed_says_so_on_every_view_but_the_requests(store):
    world = await seed(store)
    web = world.paths["Acme/eng/web"].project.id
    await store.add_usage([Usage(id=f"req_{n}", at=NOW - 60 * n, key_id="key_a", project_id=web,
                                 person_id=world.ada["id"], model="llama", status=503) for n in range(3)])
    async with TestClient(TestServer(app(Plane(store)))) as client:
        await sign_in(client, "ada@example.com")
        said = {metric: Text(await (await client.get(f"/usage?days=7&metric={metric}")).text()).text
                for metric in ("cost_micros", "prompt_tokens", "requests")}

    failed = "Every request in this span failed, so none of them counted tokens or cost."
    assert failed in said["cost_micros"] and failed in said["prompt_tokens"]
    assert failed not in said["requests"]
    assert "Total 3 3 0 0 0.00" in said["requests"]


async def test_the_csv_holds_the_persons_rows_of_the_span_only(ada, world):
    answer = await ada.get("/usage.csv?days=30")

    assert answer.status == 200 and answer.content_type == "text/csv"
    assert answer.headers["Content-Disposition"] == 'attachment; filename="llmgw-usage-2026-03-15-30d.csv"'
    assert answer.headers["Cache-Control"] == "no-store"
    rows = list(csv.DictReader(io.StringIO(await answer.text())))
    assert sorted(r["id"] for r in rows) == ["req_a1", "req_a2", "req_a3", "req_a4"]
    assert {r["model"] for r in rows} == {"llama", "qwen"}
