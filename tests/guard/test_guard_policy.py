"""Which policies apply to a key, and how several combine: the strictest wins, rule by rule."""

from __future__ import annotations

from llmgw.account.keycache import Principal
from llmgw.config.guard import Attachment, GuardSettings, JudgePolicy, Pattern, Policy, Rules, Service
from llmgw.config.loader import from_dict
from llmgw.guard.policy import BASELINE_JUDGE_CATEGORIES, Resolver, baseline_policy, combine_policies
from llmgw.guard.rules import Slot
from llmgw.store.records import ApiKey, Org, Project, ProjectPath, Team


def principal(key_id="k1", key_name="ci", project=("p1", "chat"), team=("t1", "ml"), org=("o1", "Acme")) -> Principal:
    return Principal(ApiKey(key_id, key_name, project[0], b"", "sk-llmgw-ab"),
                     ProjectPath(Org(*org), Team(team[0], org[0], team[1]), Project(project[0], team[0], project[1])),
                     None)


def test_policies_attached_by_id_or_by_name_path_apply_in_order_from_default_to_key():
    settings = GuardSettings(
        default=["base"],
        policies={n: Policy() for n in ("base", "org", "team", "project", "key", "other")},
        attach=[Attachment("key", "Acme/ml/chat/ci", ["key"]), Attachment("org", "o1", ["org"]),
                Attachment("team", "Acme/ml", ["team"]), Attachment("project", "p1", ["project"]),
                Attachment("project", "Acme/ml/other", ["other"])])
    effective = Resolver().effective(settings, 1, principal())
    assert effective.names == ("base", "org", "team", "project", "key")


def test_no_policy_and_guard_turned_off_both_mean_nothing_to_do():
    assert Resolver().effective(GuardSettings(), 1, principal()) is None
    off = GuardSettings(enabled=False, default=["p"], policies={"p": Policy(input=Rules(secrets="block"))})
    assert Resolver().effective(off, 1, principal()) is None


def test_the_strictest_action_wins_per_rule_and_limits_take_the_smallest():
    effective = combine_policies([
        ("a", Policy(input=Rules(cards="flag", pii={"email": "redact"}, max_chars=5000, restore=True))),
        ("b", Policy(fail="closed", no_store=True, stream="buffer_all",
                     input=Rules(cards="block", pii={"email": "flag", "phone": "redact"}, max_chars=2000))),
        ("c", Policy(input=Rules(max_chars=0))),
    ])
    slots = effective.input.slots
    assert slots["cards"] == Slot("block") and slots["email"] == Slot("redact") and slots["phone"] == Slot("redact")
    assert effective.input.max_chars == (2000, 0)
    assert (effective.fail, effective.no_store, effective.stream, effective.restore) == (
        "closed", True, "buffer_all", True)


def test_an_observed_policy_beside_an_enforced_one_only_watches_what_it_would_do_more():
    effective = combine_policies([
        ("baseline", Policy(input=Rules(cards="redact", secrets="block"))),
        ("trial", Policy(mode="observe", input=Rules(cards="block", secrets="flag", injection="block"))),
    ])
    slots = effective.input.slots
    assert slots["cards"] == Slot("redact", "block")
    assert slots["secrets"] == Slot("block", "")
    assert slots["injection"] == Slot("", "block")
    assert effective.mode == "enforce"


def test_restore_is_asked_only_by_a_policy_that_redacts():
    assert not combine_policies([("a", Policy(input=Rules(restore=True, pii={"email": "flag"})))]).restore
    assert combine_policies([("a", Policy(input=Rules(restore=True, pii={"email": "redact"})))]).restore


def test_deny_lists_judges_services_and_system_prompts_are_all_kept():
    judge = JudgePolicy(model="qwen3guard")
    service = Service(name="lakera", url="https://x.example/guard", blocked="flagged")
    effective = combine_policies([
        ("a", Policy(system_prompt="Be kind.", input=Rules(deny=[Pattern("tickets", r"JIRA-\d+")]), judge=judge)),
        ("b", Policy(mode="observe", system_prompt="Be brief.", services=[service],
                     input=Rules(deny=[Pattern("codes", r"X-\d+", "redact")]))),
        ("c", Policy(system_prompt="Be kind.")),
    ])
    assert effective.input.deny_slots == {"deny:tickets": Slot("block"), "deny:codes": Slot("", "redact")}
    assert effective.system_prompt == "Be kind.\n\nBe brief."
    assert [(j.policy, j.mode, j.item) for j in effective.judges] == [("a", "enforce", judge)]
    assert [(s.policy, s.mode, s.item) for s in effective.services] == [("b", "observe", service)]


def test_the_resolution_is_cached_per_key_and_made_again_for_a_new_settings_version():
    settings = GuardSettings(default=["p"], policies={"p": Policy(input=Rules(secrets="block"))})
    resolver = Resolver()
    first = resolver.effective(settings, 1, principal())
    assert resolver.effective(settings, 1, principal()) is first
    changed = GuardSettings(default=["p"], policies={"p": Policy(input=Rules(secrets="flag"))})
    assert resolver.effective(changed, 2, principal()).input.slots["secrets"] == Slot("flag")


def test_a_renamed_team_is_seen_by_attachments_that_name_it():
    settings = GuardSettings(policies={"p": Policy()}, attach=[Attachment("team", "Acme/research", ["p"])])
    resolver = Resolver()
    assert resolver.effective(settings, 1, principal()) is None
    assert resolver.effective(settings, 1, principal(team=("t1", "research"))).names == ("p",)


def test_the_baseline_policy_loads_as_a_policy_and_says_what_init_promises():
    policy = from_dict(Policy, baseline_policy())
    assert (policy.input.secrets, policy.output.secrets) == ("block", "block")
    assert (policy.input.cards, policy.output.cards) == ("redact", "redact")
    assert policy.input.injection == "flag"
    assert policy.judge is None
    with_judge = from_dict(Policy, baseline_policy("qwen3guard-0.6b"))
    assert with_judge.judge.model == "qwen3guard-0.6b"
    assert with_judge.judge.categories == BASELINE_JUDGE_CATEGORIES
    assert with_judge.fail == "closed"
    assert "Politically Sensitive Topics" not in BASELINE_JUDGE_CATEGORIES
