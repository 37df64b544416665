"""`server init --install --machines FILE`: the three, and machines for the judges alone (`role: judge`)."""

from __future__ import annotations

import pytest
import yaml

from llmgw.onboard.hainstall import from_file, judges_from_hosts
from llmgw.onboard.steps import StepFailed

THREE = [{"name": "cp-1", "address": "10.0.0.1"},
         {"name": "cp-2", "address": "10.0.0.2", "ssh": "root@10.0.0.2"},
         {"name": "cp-3", "address": "10.0.0.3", "ssh": "root@10.0.0.3"}]


def written(tmp_path, machines) -> object:
    path = tmp_path / "machines.yaml"
    path.write_text(yaml.safe_dump(machines))
    return path


def test_machines_with_role_judge_are_the_judges_and_the_three_are_the_rest(tmp_path):
    judges = [{"name": "guard-a", "role": "judge", "ssh": "ops@10.0.0.9:2222", "root": "/srv/guard"},
              {"name": "guard-b", "role": "judge", "ssh": "root@10.0.0.10"}]
    machines, found = from_file(written(tmp_path, [*THREE, *judges]))
    assert [m.store.name for m in machines] == ["cp-1", "cp-2", "cp-3"]
    assert [(j.name, str(j.ssh), j.root) for j in found] == [("guard-a", "ops@10.0.0.9:2222", "/srv/guard"),
                                                             ("guard-b", "root@10.0.0.10", "/")]


@pytest.mark.parametrize("entry", [{"name": "g", "role": "judge"},
                                   {"name": "g", "role": "judge", "ssh": "root@10.0.0.9", "ports": {}},
                                   {"name": "g", "role": "store", "ssh": "root@10.0.0.9"}])
def test_a_judge_machine_without_ssh_with_the_threes_keys_or_another_role_is_refused_saying_what_one_has(
        tmp_path, entry):
    path = written(tmp_path, [*THREE, entry])
    with pytest.raises(StepFailed) as e:
        from_file(path)
    assert e.value.sentence == (f"--machines {path}: machine 4 is not the three's, and a machine for the judges has "
                                "role: judge, name: and ssh: USER@HOST[:PORT] (and root: where not /), nothing else")


def test_more_than_two_judge_machines_are_refused():
    assert [j.name for j in judges_from_hosts(["root@10.0.0.9", "root@10.0.0.10"])] == ["judge-1", "judge-2"]
    with pytest.raises(StepFailed) as e:
        judges_from_hosts(["root@10.0.0.9", "root@10.0.0.10", "root@10.0.0.11"])
    assert e.value.sentence == "--judge-node is given 3 times; up to 2 machines take the judges"
