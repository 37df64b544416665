"""Reading --ssh USER@HOST[:PORT] and the plan the SSH side hands the machine."""

from __future__ import annotations

import pytest

from llmgw.onboard.layout import Layout
from llmgw.onboard.machine import NodePlan, run
from llmgw.onboard.ssh import Target
from llmgw.onboard.steps import Progress, StepFailed


def test_a_target_takes_its_port_from_the_text_or_from_port_which_wins():
    assert Target.parse("admin@10.0.0.7") == Target("admin", "10.0.0.7", 22)
    assert Target.parse("admin@10.0.0.7:2222") == Target("admin", "10.0.0.7", 2222)
    assert Target.parse("admin@10.0.0.7:2222", 2200).port == 2200
    assert Target.parse("root@[fd00::7]:2222") == Target("root", "fd00::7", 2222)
    assert Target.parse("root@fd00::7") == Target("root", "fd00::7", 22)
    assert str(Target("admin", "gpu-7", 2222)) == "admin@gpu-7:2222"
    assert Target("admin", "gpu-7", 2222).hostspec == "[gpu-7]:2222"


@pytest.mark.parametrize("text, sentence", [
    ("10.0.0.7", "--ssh '10.0.0.7' names no user: write USER@HOST, e.g. root@10.0.0.7"),
    ("root@10.0.0.7:ssh", "--ssh 'root@10.0.0.7:ssh': the port 'ssh' is not a number"),
])
def test_a_target_without_a_user_or_with_a_port_that_is_no_number_is_refused_with_a_sentence(text, sentence):
    with pytest.raises(StepFailed) as failed:
        Target.parse(text)
    assert str(failed.value) == sentence


def test_a_plan_that_is_not_json_fails_the_first_step_with_a_sentence_as_a_progress_line(tmp_path, capsys):
    assert run(Layout(tmp_path), "not json\n") == 1
    line = capsys.readouterr().out.strip()
    failed = Progress.parse(line)
    assert failed.state == "failed" and failed.step == "read the plan"
    assert "run llmgw node add --ssh with the same version of llmgw" in failed.sentence
    assert NodePlan.from_json('{"machine": "m", "code": null, "later": 1}') == NodePlan("m")
