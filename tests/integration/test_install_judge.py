"""The guardrails' judge setup places (issue 31, part 4): a real install into a directory, with the simulated
starter and so the simulated judge, answering through the baseline policy that asks it.

The judge the install places here is sim-engine answering as Qwen3Guard-Gen does (llmgw/onboard/judge.py);
the real Qwen3Guard GGUF needs Hugging Face, which these machines cannot reach. Its sizing and the plan's
sentence for a machine without room are tests/onboard/test_parts.py's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import openai
import pytest

from llmgw.control.adminclient import AdminClient
from tests.support.installs import end_install
from tests.support.pgcluster import free_port

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("client", "agent", "admin", "metrics")


def _install(root: Path, ports: dict[str, int]) -> subprocess.CompletedProcess:
    listen = [arg for role in ROLES for arg in (f"--listen-{role}", f"127.0.0.1:{ports[role]}")]
    return subprocess.run([sys.executable, "-m", "llmgw", "server", "init", "--install", "--root", str(root),
                           "--services", "supervised", "--starter", "sim", *listen, "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def installed():
    """One install for the module: the second test runs it again, which is what it is about."""
    above = Path(tempfile.mkdtemp(prefix="llmgw-judge-"))
    root = above / "root"
    ports = {role: free_port() for role in ROLES}
    try:
        done = _install(root, ports)
        assert done.returncode == 0, done.stderr
        yield root, ports, json.loads(done.stdout)
    finally:
        end_install(root, f"127.0.0.1:{ports['admin']}", root / "var/lib/llmgw/admin-token")
        shutil.rmtree(above, ignore_errors=True)


def test_an_install_places_a_judge_that_the_baseline_policy_asks_before_a_prompt_is_answered(installed):
    root, ports, result = installed
    assert result["judge"] == "judge-sim" and result["steps"]["judge"] == "done"
    assert result["judge_speed"].startswith("three judgments took ")
    assert result["judge_speed"].endswith(" s against a budget of 5 s")  # fast enough: no advice given

    admin = AdminClient(f"127.0.0.1:{ports['admin']}", str(root / "var/lib/llmgw/admin-token"))
    model = admin.call("GET", "/api/v1/models/judge-sim")
    assert model["spec"]["role"] == "judge"
    policy = admin.call("GET", "/api/v1/config", query={"path": "guard.policies.baseline"})["value"]
    assert (policy["judge"]["model"], policy["judge"]["on"], policy["fail"]) == ("judge-sim", "both", "closed")

    client = openai.OpenAI(base_url=result["client_api"], api_key=result["api_key"], max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "how do I stab him"}])
    assert refused.value.body["code"] == "guardrail_blocked"
    assert "judge:Violent" in refused.value.body["message"]
    answer = client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "Say hello."}])
    assert answer.choices[0].message.content


def test_an_install_run_again_leaves_its_judge_and_the_policy_as_they_are(installed):
    root, ports, first = installed
    again = _install(root, ports)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["steps"]["judge"] == "unchanged" and result["judge"] == "judge-sim"


def test_ctl_guard_judge_check_times_a_judge_the_cluster_places_through_the_control_plane(installed):
    root, ports, _ = installed
    done = subprocess.run([sys.executable, "-m", "llmgw", "ctl", "guard", "judge", "check", "--burst", "2",
                           "--admin", f"127.0.0.1:{ports['admin']}", "--token-file",
                           str(root / "var/lib/llmgw/admin-token")], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("judge-sim, 1 replica(s), a request waits 5.0 s for it (policy baseline), timed "
                                  "by the control plane\nalone: ")
    assert "2 at once: slowest" in done.stdout and "ok: judgments keep within the budget" in done.stdout
