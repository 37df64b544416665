"""Which tools a key's chain grants: patterns at each level, each narrowing, none granted anywhere is none."""

from __future__ import annotations

from llmgw.account.limits import effective
from llmgw.store import Limits


def _chain(org=None, team=None, project=None, key=None):
    return [None if t is None else Limits(scope, "id", tools=t)
            for scope, t in (("org", org), ("team", team), ("project", project), ("key", key))]


def test_a_chain_that_names_no_tools_grants_none():
    assert not effective(_chain()).allows_tool("jira.search")


def test_a_pattern_at_one_level_grants_the_tools_it_matches():
    limits = effective(_chain(team=["jira.*", "db.query"]))
    assert limits.allows_tool("jira.search") and limits.allows_tool("db.query")
    assert not limits.allows_tool("db.drop")


def test_a_team_under_an_org_that_names_other_tools_sees_none_of_its_own():
    limits = effective(_chain(org=["hr.*"], team=["jira.*"]))
    assert not limits.allows_tool("jira.search") and not limits.allows_tool("hr.people")


def test_an_empty_list_closes_the_level_to_every_tool():
    assert not effective(_chain(org=["*"], key=[])).allows_tool("jira.search")
