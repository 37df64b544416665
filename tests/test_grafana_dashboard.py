"""packaging/grafana/llmgw.json: the dashboard shipped for a site's Grafana, importable and asking for real metrics.

That the metrics it names exist is held against a running server in
tests/integration/test_cluster_commands.py; here, that Grafana can import it,
and that the GPU row asks for what the leader's collector exports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from llmgw.control.gpumetrics import gpu_metrics

DASHBOARD = Path(__file__).resolve().parents[1] / "packaging" / "grafana" / "llmgw.json"


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def dashboard_metrics() -> set[str]:
    """Every llmgw metric the dashboard's queries and its variables' queries name."""
    variables = [v.get("definition", "") for v in _dashboard()["templating"]["list"]]
    return {name for expr in _exprs() + variables for name in re.findall(r"\bllmgw_[a-z_]+", expr)}


def test_every_panel_has_its_own_id_and_place_and_reads_the_chosen_prometheus():
    panels = _dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    taken: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert g["x"] + g["w"] <= 24 and not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]


def test_every_query_uses_only_the_dashboards_own_variables_and_covers_what_operators_watch():
    defined = {v["name"] for v in _dashboard()["templating"]["list"]} | {"__rate_interval"}
    for expr in _exprs():
        assert set(re.findall(r"\$(\w+)", expr)) <= defined, expr
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
    names = dashboard_metrics()
    for watched in ("llmgw_requests_total", "llmgw_tokens_total", "llmgw_time_to_first_token_seconds_bucket",
                    "llmgw_admission_waiting", "llmgw_breaker_state", "llmgw_cache_hits", "llmgw_replicas",
                    "llmgw_nodes", "llmgw_budget_spent_ratio"):
        assert watched in names


def test_the_gpu_row_shows_each_cards_work_by_node_and_card_from_metrics_the_leader_exports():
    exported = {family.name for family in gpu_metrics([])}  # every family is announced, cards or none
    named = {name for name in dashboard_metrics() if name.startswith("llmgw_gpu_")}
    assert named <= exported, sorted(named - exported)
    for watched in ("llmgw_gpu_utilization_ratio", "llmgw_gpu_memory_used_bytes", "llmgw_gpu_memory_total_bytes",
                    "llmgw_gpu_power_watts", "llmgw_gpu_power_limit_watts", "llmgw_gpu_temperature_celsius",
                    "llmgw_gpu_sm_active_ratio", "llmgw_gpu_sm_occupancy_ratio"):
        assert watched in named

    panels = _dashboard()["panels"]
    row = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == "GPUs")
    gpu_panels = [p for p in panels[row + 1:] if p["type"] != "row"][:6]
    assert all("llmgw_gpu_" in t["expr"] for p in gpu_panels for t in p["targets"])
    for p in gpu_panels:
        for t in p["targets"]:
            # One series per card however many control planes were scraped (only the leader exports them),
            # and the node picker narrows every panel.
            assert "max by (node, gpu)" in t["expr"] and 'node=~"$node"' in t["expr"], p["title"]
            assert "{{node}}" in t["legendFormat"] and "{{gpu}}" in t["legendFormat"], p["title"]
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in gpu_panels}
    assert units["GPU utilisation, by card"] == "percentunit"
    assert units["GPU memory in use, by card"] == "percentunit"
    assert units["GPU memory used, by card"] == "bytes"
    assert units["GPU power against its limit, by card"] == "percentunit"
    assert units["GPU temperature, by card"] == "celsius"
    node = next(v for v in _dashboard()["templating"]["list"] if v["name"] == "node")
    assert node["definition"] == "label_values(llmgw_gpu_memory_total_bytes, node)" and node["includeAll"]
