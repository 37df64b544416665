"""Usage of a model that costs nothing, as a newcomer's first hour has it (issue 25, item 12).

The gateway's model has no price, as the test model of a fresh install has not. Its requests are
counted but cost nothing, so the usage views of spend have nothing to draw: the portal and
`llmgw ctl usage` say that, in the same sentence, rather than "Nothing was used".
"""

from __future__ import annotations

import openai

from tests.e2e.conftest import MODEL
from tests.e2e.test_portal_journeys import ASK, make_key, until

GATEWAY_PRICE = None  # conftest's gateway: MODEL with no price
NO_SPEND = "No spend in this span: the models used cost nothing."


def test_requests_to_a_model_with_no_price_say_no_spend_on_the_page_and_in_ctl_usage(gateway, pages):
    page = pages("member").page
    client = openai.OpenAI(api_key=make_key(page, gateway.url, "free"), base_url=gateway.url + "/v1",
                           max_retries=0)
    for _ in range(5):
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5)

    page.goto(gateway.url + "/usage")
    until(page, lambda p: p.inner_text("table.by-model tfoot td >> nth=0") == "5")

    said = page.inner_text(".chart-empty")
    assert said.startswith(NO_SPEND) and "Nothing was used" not in page.inner_text("main")
    with page.expect_navigation():
        page.click(".chart-empty a")
    assert page.locator("nav.choices a[aria-current=page]").all_inner_texts() == ["30 days", "Requests"]
    drawn = page.locator("svg.chart rect.bar").evaluate_all("bars => bars.map(b => +b.dataset.value)")
    assert sum(drawn) == 5
    table = gateway.server.ctl("ctl", "usage", "--by", "model", "--since", "1h")
    assert table.returncode == 0 and table.stdout.rstrip().endswith(NO_SPEND), table.stdout
