"""The shipped Prometheus rules and Alertmanager example, checked by Debian's promtool and amtool.

`promtool test rules` runs packaging/prometheus/llmgw-rules.test.yml: series written as llmgw exports
them, and each alert expected firing at one time and silent at another. Here: that the file does that for
every alert, that every metric a rule reads is one llmgw exports, that the example routes a tenant's budget
alert to the tenant's administrators as well as the operators, and what the leader's mirror collector says.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llmgw.control.mirrormetrics import MirrorCollector
from llmgw.control.mirrors import Seen

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "packaging" / "prometheus"
RULES = PROMETHEUS / "llmgw-rules.yml"


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is Debian's (apt-get install prometheus prometheus-alertmanager); build.py test installs it"
    return found


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool(argv[0]), *argv[1:]], capture_output=True, text=True, timeout=60, cwd=PROMETHEUS)


def alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def test_the_rules_are_valid_and_each_says_what_to_do():
    checked = run("promtool", "check", "rules", str(RULES))

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"] and len(rule["annotations"]["description"]) > 80, name


def test_every_alert_fires_on_its_series_and_stays_silent_before():
    tested = run("promtool", "test", "rules", "llmgw-rules.test.yml")

    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load((PROMETHEUS / "llmgw-rules.test.yml").read_text())["tests"]
    seen = [(case["alertname"], bool(case["exp_alerts"])) for test in cases for case in test["alert_rule_test"]]
    assert {(name, fires) for name in alerts() for fires in (True, False)} == set(seen)


def test_every_metric_a_rule_reads_is_one_llmgw_exports():
    source = "\n".join(path.read_text() for path in (ROOT / "llmgw").rglob("*.py"))
    read = {metric for rule in alerts().values() for metric in re.findall(r"\bllmgw_[a-z0-9_]+", rule["expr"])}

    assert read and not {metric for metric in read if f'"{metric}"' not in source}


@pytest.mark.parametrize(("labels", "receivers"), [
    ({"alertname": "LlmgwBudgetNearlySpent", "scope": "project", "id": "prj_acme_chat", "period": "month"},
     "acme-admins,operators"),
    ({"alertname": "LlmgwBudgetNearlySpent", "scope": "org", "id": "org_beta01", "period": "day"},
     "beta-admins,operators"),
    ({"alertname": "LlmgwBudgetNearlySpent", "scope": "project", "id": "prj_someone_else", "period": "month"},
     "operators"),
    ({"alertname": "LlmgwNodeLost", "severity": "critical", "node": "gpu-1"}, "operators-pager,operators"),
    ({"alertname": "LlmgwGpuHot", "severity": "warning", "node": "gpu-1", "gpu": "0"}, "operators"),
])
def test_the_alertmanager_example_routes_a_tenants_budget_to_its_administrators_too(labels, receivers):
    checked = run("amtool", "check-config", "alertmanager.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    routed = run("amtool", "config", "routes", "test", "--config.file=alertmanager.yml",
                 *(f"{k}={v}" for k, v in labels.items()))

    assert routed.stdout.strip() == receivers, routed.stdout + routed.stderr


class _Keeper:
    """What the collector reads of the leader's MirrorKeeper: each mirror at its last read."""

    def __init__(self, *seen: Seen):
        self.seen = {s.url: s for s in seen}


def test_a_mirror_that_lacks_its_peers_files_is_counted_behind_and_one_that_is_away_down():
    whole = Seen("https://m1:9092", ok=True, files=[{"key": "a", "state": "held"}, {"key": "b", "state": "held"}])
    behind = Seen("https://m2:9092", ok=True, files=[{"key": "a", "state": "held"}, {"key": "b", "state": "fetching"}])
    away = Seen("https://m3:9092", ok=False)
    collector = MirrorCollector(_Keeper(whole, behind, away), leading=lambda: True)

    found = {(m.name, s.labels["mirror"]): s.value for m in collector.collect() for s in m.samples}

    assert found[("llmgw_mirror_files_behind", "https://m2:9092")] == 1
    assert found[("llmgw_mirror_files_behind", "https://m1:9092")] == 0
    assert found[("llmgw_mirror_files_behind", "https://m3:9092")] == 2
    assert found[("llmgw_mirror_up", "https://m3:9092")] == 0 and found[("llmgw_mirror_up", "https://m1:9092")] == 1
    assert found[("llmgw_mirror_files_held", "https://m1:9092")] == 2
    assert list(MirrorCollector(_Keeper(whole), leading=lambda: False).collect()) == [], "a standby says nothing"
