"""`llmgw ctl tree add`: the shared flags work before the action as well as after it."""

from __future__ import annotations

import pytest

from llmgw.cli.main import build_parser


@pytest.mark.parametrize("argv", [
    ["ctl", "tree", "--json", "add", "org", "Acme"],
    ["ctl", "tree", "add", "org", "Acme", "--json"],
])
def test_json_asked_before_or_after_the_action_is_kept(argv):
    assert build_parser().parse_args(argv).json is True


def test_without_json_the_answer_is_a_sentence_and_an_admin_given_first_is_kept():
    args = build_parser().parse_args(["ctl", "tree", "--admin", "10.0.0.5:9090", "add", "team", "Acme/ml"])

    assert args.json is False and args.admin == "10.0.0.5:9090"
    assert (args.kind, args.path) == ("team", "Acme/ml")
