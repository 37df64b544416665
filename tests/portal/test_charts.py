"""Usage charts as a reader's browser gets them: inline SVG, no style, no script."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from llmgw.accounting.reports import NOTHING_USED, Series
from llmgw.portal import i18n
from llmgw.portal.charts import OTHER, bars
from llmgw.store import UsageDay

SVG = "{http://www.w3.org/2000/svg}"
DAY0 = 20500  # 2026-02-16


def day(d: int, model: str, *, cost: int = 0, requests: int = 0) -> UsageDay:
    return UsageDay(DAY0 + d, None, model, requests, 0, 0, 0, 0, cost)


def series(groups: dict[str, list[int]], metric: str = "cost") -> Series:
    days = list(range(DAY0, DAY0 + len(next(iter(groups.values()), []))))
    built = {name: [day(d, name, **{metric: v}) for d, v in enumerate(values)] for name, values in groups.items()}
    total = sum(sum(v) for v in groups.values())
    totals = UsageDay(days[0] if days else DAY0, None, "", 0, 0, 0, 0, 0, total)
    return Series(days, built, totals)


def parse(markup: str) -> ET.Element:
    return ET.fromstring(str(markup))


def bar_rects(svg: ET.Element) -> list[ET.Element]:
    return [r for r in svg.iter(f"{SVG}rect") if "bar" in r.get("class", "").split()]


def test_the_chart_is_valid_svg_with_a_title_a_reader_can_hear():
    svg = parse(bars(series({"llama": [1_000_000, 2_500_000, 0]}), lang="en", title="Spend by day"))

    assert svg.tag == f"{SVG}svg"
    assert svg.get("role") == "img"
    assert svg.find(f"{SVG}title").text == "Spend by day"
    assert "2026-02-16 – 2026-02-18 (UTC): 3.50" in svg.find(f"{SVG}desc").text


def test_bars_are_as_tall_as_their_share_of_the_tallest_day():
    svg = parse(bars(series({"llama": [400, 100, 0, 300], "qwen": [400, 0, 0, 50]}), lang="en", title="t"))

    rects = bar_rects(svg)
    heights = {(r.get("data-value"), r.get("class")): float(r.get("height")) for r in rects}
    tallest = heights[("400", "bar bar-0")] + heights[("400", "bar bar-1")]
    assert heights[("100", "bar bar-0")] == pytest.approx(tallest * 100 / 800, abs=0.01)
    assert heights[("300", "bar bar-0")] == pytest.approx(tallest * 300 / 800, abs=0.01)
    assert heights[("50", "bar bar-1")] == pytest.approx(tallest * 50 / 800, abs=0.01)
    assert len(rects) == 5, "a day with nothing draws no bar"


def test_a_bars_title_names_its_day_group_and_value_in_the_readers_language():
    svg = parse(bars(series({"llama": [1_234_560_000]}), lang="tr", title="Harcama"))

    (rect,) = bar_rects(svg)
    assert rect.find(f"{SVG}title").text == "2026-02-16: llama, 1.234,56"
    svg = parse(bars(series({"llama": [1_234_560_000]}), lang="en", title="Spend"))
    assert bar_rects(svg)[0].find(f"{SVG}title").text == "2026-02-16: llama, 1,234.56"


def test_requests_are_counted_in_whole_numbers():
    svg = parse(bars(series({"llama": [12_345, 5]}, metric="requests"), lang="tr", metric="requests", title="t"))

    assert [r.find(f"{SVG}title").text for r in bar_rects(svg)] == ["2026-02-16: llama, 12.345", "2026-02-17: llama, 5"]


def test_groups_past_six_are_drawn_together_as_other():
    groups = {f"m{i}": [10 - i] for i in range(8)}

    svg = parse(bars(series(groups), lang="tr", title="t"))

    classes = [r.get("class") for r in bar_rects(svg)]
    assert classes == [f"bar bar-{i}" for i in range(6)] + ["bar bar-other"]
    assert bar_rects(svg)[-1].get("data-value") == str(4 + 3)
    assert i18n.gettext("tr", OTHER) in [t.text for t in svg.iter(f"{SVG}text")]


def test_the_chart_has_no_style_no_script_and_no_event_handler():
    text = str(bars(series({"<b>odd & model</b>": [1, 2]}), lang="en", title="<script>x</script>"))

    svg = parse(text)
    for element in svg.iter():
        assert "style" not in element.attrib
        assert not [a for a in element.attrib if a.startswith("on")]
        assert element.tag not in (f"{SVG}script", f"{SVG}style", f"{SVG}foreignObject")
    assert svg.find(f"{SVG}title").text == "<script>x</script>", "the title is text, escaped"
    assert "<b>odd" not in text


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_an_empty_span_is_a_sentence_in_the_readers_language_rather_than_an_empty_frame(lang):
    assert NOTHING_USED == "Nothing was used in this span."
    for empty in (series({}), series({"llama": [0, 0, 0]})):
        assert parse(bars(empty, lang=lang, title="t")).text == i18n.gettext(lang, NOTHING_USED)


def test_an_unknown_metric_is_refused_with_the_ones_it_knows():
    with pytest.raises(ValueError, match="cost_micros"):
        bars(series({"llama": [1]}), lang="en", metric="joy", title="t")


def test_the_legend_names_groups_as_the_page_labels_them_and_cuts_a_long_name_keeping_it_whole_in_its_title():
    long = "acme-research-laboratories/retrieval/search"
    svg = parse(bars(series({"prj_1": [3_000_000], "prj_2": [2_000_000], "": [1_000_000]}), lang="en", title="t",
                     labels={"prj_1": "acme/ml/chat", "prj_2": long, "": "none"}))

    chat, cut, nobody = [t for t in svg.iter(f"{SVG}text") if t.get("class") == "legend"]
    assert chat.text == "acme/ml/chat" and nobody.text == "none"
    assert cut.find(f"{SVG}title").text == long
    assert cut.find(f"{SVG}title").tail == long[:29] + "…"
    assert [r.find(f"{SVG}title").text for r in bar_rects(svg)] == [
        "2026-02-16: acme/ml/chat, 3.00", f"2026-02-16: {long}, 2.00", "2026-02-16: none, 1.00"]
