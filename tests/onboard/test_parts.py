"""The parts of an install, the plan and the command that repeats it (llmgw/onboard/parts.py)."""

from __future__ import annotations

import pytest

from llmgw.onboard.parts import PART, ChoiceError, Choices, Machine, command, plan


def test_pictures_cannot_be_turned_on_in_setup_and_say_what_is_still_needed():
    c = Choices()
    said = c.toggle("media")
    assert said == "Pictures and 3D is installed by hand: add it once the cluster runs (docs/media.md#presets)."
    assert not c.is_on("media")
    assert {line.part: line for line in plan(c)}["media"].sentence == (
        "Pictures and 3D: installed by hand; no pictures or 3D until a node names its ComfyUI in "
        "engines.comfyui.dir.")


def test_the_model_mirror_is_left_out_unless_chosen_and_once_chosen_is_in_the_plan_and_the_command():
    c = Choices(starter="sim")
    assert not c.is_on("mirror")
    assert {line.part: line for line in plan(c)}["mirror"].sentence == (
        "Model mirror: left out; each node fetches its own weights.")
    assert c.toggle("mirror") == ""
    c.mirror_dir = "/data/mirror"
    c.check()
    assert {line.part: line for line in plan(c)}["mirror"].sentence == (
        "Model mirror: on this machine, files in /data/mirror; nodes fetch weights from it only.")
    assert command(c) == "llmgw server init --install --starter sim --mirror --mirror-dir /data/mirror"
    c.machines = 3
    assert "on this machine and the second, each the other's peer" in {
        line.part: line for line in plan(c)}["mirror"].sentence


@pytest.mark.parametrize(("field", "value", "sentence"), [
    ("mirror_dir", "mirror", 'the mirror\'s folder "mirror" is not a full path; give one such as '
                             "/var/cache/llmgw/mirror or /data/mirror."),
    ("mirror_listen", "8600", 'the mirror\'s address "8600" is not one to listen on; write it as :8600 or '
                              "10.0.0.5:8600."),
    ("mirror_listen", ":7443", "the mirror's port 7443 is the agent port too; give the mirror another."),
])
def test_a_mirror_choice_that_cannot_be_installed_is_refused_naming_the_mirror(field, value, sentence):
    c = Choices()
    c.toggle("mirror")
    setattr(c, field, value)
    with pytest.raises(ChoiceError) as e:
        c.check()
    assert (e.value.part, str(e.value)) == ("mirror", sentence)


GB = 1024 ** 3


def test_the_judge_of_one_machine_keeps_up_to_four_cores_and_two_gigabytes_and_is_in_plan_and_command():
    c = Choices(machine_cpus=8, machine_memory=16 * GB)
    assert c.is_on("judge")
    assert {line.part: line for line in plan(c)}["judge"].sentence == (
        "Guardrails' judge: qwen3guard-0.6b from hf:QuantFactory/Qwen3Guard-Gen-0.6B-GGUF/Qwen3Guard-Gen-0.6B.Q8_0.gguf"
        ": 1 copy, each keeping 4 cores and 2 GB, asked by the baseline policy; its speed is measured once it is up.")
    assert "judge" not in command(c)
    c.judge_replicas = 2
    assert "each keeping 2 cores" in {line.part: line for line in plan(c)}["judge"].sentence
    assert command(c).endswith("--judge-replicas 2")
    assert c.toggle("judge") == ""
    assert not c.is_on("judge") and command(c).endswith("--no-judge")


@pytest.mark.parametrize(("cpus", "replicas", "cores"), [(1, 1, 1), (2, 1, 2), (4, 1, 4), (16, 1, 4), (2, 2, 1),
                                                          (4, 2, 2), (16, 2, 2)])
def test_judge_cores_follow_the_measured_rule(cpus, replicas, cores):
    from llmgw.onboard.judge import judge_cores

    assert judge_cores(cpus, replicas) == cores


def test_a_machine_without_room_for_the_judge_leaves_it_out_and_the_plan_says_why():
    c = Choices(machine_cpus=2, machine_memory=6 * GB)  # the starter's 4 GB, the judge's 2, the machine's own 1
    assert not c.is_on("judge")
    assert {line.part: line for line in plan(c)}["judge"].sentence == (
        "Guardrails' judge: left out: this machine has 6.0 GB of memory, and the judge needs 2 GB for it beside the "
        "rest (7.0 GB in all); add one on a larger node later (docs/guardrails.md); the baseline policy still "
        "refuses secrets and masks card numbers, without a judge.")
    assert command(c).endswith("--no-judge")
    c.toggle("judge")
    assert c.toggle("judge").startswith("The guardrails' judge does not fit here: this machine has 6.0 GB")
    c.starter = "sim"
    assert c.is_on("judge")  # beside a simulated starter, a simulated judge, which needs next to nothing
    assert "judge-sim, a simulated judge" in {line.part: line for line in plan(c)}["judge"].sentence


def test_a_judge_without_a_node_to_run_on_is_refused_naming_the_judge():
    c = Choices(starter="sim", machine_cpus=4, machine_memory=16 * GB)
    c.on.update({"node": False, "starter": False, "judge": True})
    with pytest.raises(ChoiceError) as e:
        c.check()
    assert (e.value.part, str(e.value)) == ("judge", 'the judge needs a node to run on; turn on "This machine as a '
                                                     'node" or leave the judge out.')


def test_notifications_send_every_event_to_the_webhook_chosen_and_say_so_in_the_plan_and_the_command():
    c = Choices(starter="sim", root="/tmp/r", services="supervised")
    assert not c.is_on("notify"), "off until a webhook is given"
    c.toggle("notify")
    c.webhook, c.webhook_format = "https://hooks.slack.com/services/T0/B0/XX", "slack"
    c.check()

    line = {line.part: line for line in plan(c)}["notify"]
    assert line.installed and line.sentence == ("Notifications: every event sent to "
                                                "https://hooks.slack.com/services/T0/B0/XX as Slack messages.")
    assert command(c) == ("llmgw server init --install --starter sim --no-firewall --webhook "
                          "https://hooks.slack.com/services/T0/B0/XX --webhook-format slack --root /tmp/r "
                          "--services supervised")


@pytest.mark.parametrize(("url", "private", "sentence"), [
    ("", False, "give the webhook's address (https://…), or turn notifications off."),
    ("ftp://ops.example.com/x", False, "a webhook's URL is http:// or https:// with a host"),
    ("http://127.0.0.1:9/hook", False, "127.0.0.1 is this machine (loopback); if the webhook is meant to be "
                                       "there, say so (the box below, or --webhook-allow-private)."),
])
def test_a_webhook_that_cannot_be_sent_to_is_refused_naming_notifications(url, private, sentence):
    c = Choices()
    c.toggle("notify")
    c.webhook, c.webhook_private = url, private
    with pytest.raises(ChoiceError) as refused:
        c.check()
    assert refused.value.part == "notify" and str(refused.value).startswith(sentence), str(refused.value)
    c.webhook_private = True
    if url.startswith("http://127."):
        c.check()  # there as meant, as the person said


def test_a_part_that_is_always_there_stays_on():
    c = Choices()
    assert c.toggle("control") == "Control plane is always part of an install."
    assert c.is_on("control")


def test_the_plan_says_what_is_left_out_and_what_that_costs():
    c = Choices()
    c.toggle("firewall")
    lines = {line.part: line for line in plan(c)}
    assert not lines["firewall"].installed
    assert lines["firewall"].sentence == ("Firewall: left out; the agent, metrics and engine ports are open to "
                                          "anyone who reaches this machine.")
    assert lines["starter"].installed and "qwen2.5-0.5b" in lines["starter"].sentence
    assert "all_three" not in lines  # a part for three machines is not in a one-machine plan


def test_the_command_repeats_the_choices_as_flags():
    c = Choices(starter="sim", root="/tmp/r", services="supervised")
    c.listen["client"] = "127.0.0.1:8181"
    assert command(c) == ("llmgw server init --install --starter sim --no-firewall "
                          "--listen-client 127.0.0.1:8181 --root /tmp/r --services supervised")


def test_the_command_for_three_machines_names_the_other_two_and_how_to_log_in():
    c = Choices(machines=3, starter="sim")
    c.others[0].address, c.others[0].key_path = "10.0.0.6", "/root/.ssh/id_ed25519"
    c.others[1].address, c.others[1].user, c.others[1].auth = "10.0.0.7", "admin", "agent"
    c.others[1].sudo_password = "not shown"
    c.vip = "10.0.0.160/24"
    c.check()
    assert command(c) == ("llmgw server init --install --starter sim --ha root@10.0.0.6,admin@10.0.0.7 "
                          "--key /root/.ssh/id_ed25519 --sudo-password --vip 10.0.0.160/24")


def test_a_floating_address_that_cannot_be_one_is_refused_before_anything_is_installed():
    c = Choices(machines=3)
    for other, address in zip(c.others, ("10.0.0.6", "10.0.0.7"), strict=True):
        other.address, other.auth = address, "agent"
    c.vip = "127.0.0.9/8"
    with pytest.raises(ChoiceError) as e:
        c.check()
    assert e.value.part == "all_three" and str(e.value).startswith("127.0.0.9 cannot be a floating address")


def test_any_gguf_on_hugging_face_is_a_starter_and_named_after_its_file():
    c = Choices(starter="hf:bartowski/Phi-3.5-mini-instruct-GGUF/Phi-3.5-mini-instruct-Q4_K_M.gguf")
    c.check()
    assert c.starter_source() == ("phi-3.5-mini-instruct-q4_k_m", c.starter, "llamacpp")


@pytest.mark.parametrize("change, part, sentence", [
    ({"starter": "llama-9000"}, "starter", '"llama-9000" is not a starter model'),
    ({"admin_email": "admin"}, "control", '"admin" is not an e-mail address'),
    ({"max_key_ttl": "soon"}, "limits", '"soon" is not a lifetime'),
])
def test_a_choice_that_cannot_be_installed_names_the_setting_to_open(change, part, sentence):
    c = Choices(**change)
    with pytest.raises(ChoiceError) as e:
        c.check()
    assert e.value.part == part and str(e.value).startswith(sentence)


def test_an_install_on_the_machine_has_the_firewall_and_one_into_a_directory_leaves_it_out():
    assert Choices().is_on("firewall")
    c = Choices(root="/tmp/trial")
    assert not c.is_on("firewall")
    c.check()
    assert "--no-firewall" in command(c)


def test_an_install_into_a_directory_leaves_the_machines_firewall_alone():
    c = Choices(root="/tmp/trial")
    assert c.toggle("firewall") == "" and c.is_on("firewall")
    with pytest.raises(ChoiceError, match="an install under /tmp/trial cannot write this machine's firewall") as e:
        c.check()
    assert e.value.part == "firewall"


def test_a_starter_model_without_a_node_to_run_on_is_refused():
    c = Choices()
    c.toggle("node")
    with pytest.raises(ChoiceError, match="a starter model needs a node to run on") as e:
        c.check()
    assert e.value.part == "starter"


def test_three_machines_need_each_others_address_and_a_way_in():
    c = Choices(machines=3)
    with pytest.raises(ChoiceError, match="machine 2 has no address"):
        c.check()
    c.others[0].address, c.others[0].auth = "10.0.0.7", "password"
    with pytest.raises(ChoiceError, match=r"machine 2 \(root@10.0.0.7\) is to be reached with a password"):
        c.check()
    c.others[0].password = "hunter2"
    assert "hunter2" not in repr(c)  # never in a log line or a traceback's locals


def test_every_part_of_the_reference_table_is_listed():
    assert [p.name for p in PART.values()] == [
        "Control plane", "Store", "Control plane on all three", "Model mirror", "This machine as a node",
        "Starter model", "Pictures and 3D", "Guardrails' judge", "Firewall", "Notifications", "Limits and keys",
        "Taking turns on a card", "Offline bundle"]


def test_an_offline_bundle_is_installed_only_when_it_is_the_file_its_sha256_names(tmp_path):
    import hashlib

    bundle = tmp_path / "llmgw-0.2.0-bundle.tar"
    bundle.write_bytes(b"a bundle's bytes")
    digest = hashlib.sha256(b"a bundle's bytes").hexdigest()
    c = Choices(starter="sim", root="/tmp/r", services="supervised", machine_cpus=4, machine_memory=16 * GB)
    assert not c.is_on("bundle")
    assert c.toggle("bundle") == ""
    for path, given, said in [
        ("bundle.tar", digest, 'there is no bundle at "bundle.tar"; give the full path of the llmgw-VERSION-bundle.tar '
                               "file carried in."),
        (str(bundle), "", "give the bundle's sha256 as its maker published it (64 hexadecimal digits, as sha256sum "
                          "prints it), so a changed file is refused."),
        (str(bundle), "0" * 64, f"{bundle} is not the bundle whose sha256 you gave: its own is {digest}. Copy it "
                                "again, or check the sha256 with whoever made it."),
    ]:
        c.bundle, c.bundle_sha256 = path, given
        with pytest.raises(ChoiceError) as e:
            c.check()
        assert (e.value.part, str(e.value)) == ("bundle", said)
    c.bundle_sha256 = digest.upper()  # as some tools print it
    c.check()
    assert {line.part: line for line in plan(c)}["bundle"].sentence == (
        f"Offline bundle: the program and the engine wheels from {bundle} (sha256 {digest.upper()[:12]}…), every "
        "file checked; nodes take llama.cpp from it, asking no registry.")
    assert f"--bundle {bundle} --bundle-sha256 {digest.upper()}" in command(c)


def test_judges_on_machines_of_their_own_are_one_on_each_selecting_the_judge_label_and_said_in_plan_and_command():
    from llmgw.onboard.judge import judge_doc

    c = Choices(machines=3, machine_cpus=2, machine_memory=4 * GB,
                others=[Machine(address="10.0.0.2", auth="agent"), Machine(address="10.0.0.3", auth="agent")],
                judge_nodes=["root@10.0.0.21", "root@10.0.0.22"])
    c.on["node"] = False  # the three are control planes only: the judges have machines of their own
    assert c.is_on("judge") and c.judge_copies() == 2 and c.judge_room() is None
    c.check()
    assert {line.part: line for line in plan(c)}["judge"].sentence == (
        "Guardrails' judge: qwen3guard-0.6b from hf:QuantFactory/Qwen3Guard-Gen-0.6B-GGUF/Qwen3Guard-Gen-0.6B.Q8_0.gguf"
        ": 2 copies on root@10.0.0.21 and root@10.0.0.22, machines of their own (llmgw.role=judge), each keeping "
        "up to 4 cores and 2 GB, asked by the baseline policy; its speed is measured once it is up.")
    assert command(c).count("--judge-node") == 2 and "--judge-node root@10.0.0.22" in command(c)

    # One on each machine, on up to four of its cores; the node selector keeps it off every other node.
    [profile] = judge_doc("qwen3guard-0.6b", cpus=8, replicas=2, own_nodes=2)["profiles"]
    assert profile["cpu_cores"] == 4 and profile["node_selector"] == {"llmgw.role": "judge"}
    [shared] = judge_doc("qwen3guard-0.6b", cpus=4, replicas=2, own_nodes=1)["profiles"]
    assert shared["cpu_cores"] == 2  # two on one 4-core machine: two cores each, as the original measured
    assert "node_selector" not in judge_doc("qwen3guard-0.6b", cpus=8, replicas=1)["profiles"][0]


def test_machines_for_the_judges_on_one_machine_are_refused_saying_how_to_add_one_later():
    c = Choices(starter="sim", judge_nodes=["root@10.0.0.21"])
    with pytest.raises(ChoiceError) as e:
        c.check()
    assert str(e.value) == ("machines of the judges' own are for three machines; on one, add one once the cluster "
                            "runs: llmgw node add --ssh USER@HOST --label llmgw.role=judge.")


def test_a_judges_machine_that_is_not_user_at_host_or_is_one_of_the_three_is_refused_on_the_machines_screen():
    others = [Machine(address="10.0.0.2:2222", auth="agent"), Machine(address="10.0.0.3", auth="agent")]
    for given, said in [
        (["10.0.0.21"], 'the judges\' machine 1, "10.0.0.21", is not USER@HOST[:PORT]; write it as root@10.0.0.9, '
                        "or leave it empty."),
        (["root@10.0.0.21", "root@10.0.0.2:2222"], "the judges' machine 2 (root@10.0.0.2:2222) is one of the three; "
                                                   "a judge's machine is one of its own, or leave it empty."),
    ]:
        c = Choices(machines=3, starter="sim", others=others, judge_nodes=given)
        with pytest.raises(ChoiceError) as e:
            c.check()
        assert (e.value.part, str(e.value)) == ("machines", said)
    c = Choices(machines=3, starter="sim", others=others, judge_nodes=["admin@10.0.0.21:2200"])
    c.check()
    # The same host as machine 2 on another sshd's port: one host standing for several machines, as in a trial.
    c = Choices(machines=3, starter="sim", others=others, judge_nodes=["root@10.0.0.2:2223", "root@10.0.0.3:2222"])
    c.check()
    c.on["judge"] = False
    with pytest.raises(ChoiceError, match="machines are given for the judges, but the guardrails' judge is off"):
        c.check()


def test_a_judge_machine_too_small_is_named_in_the_sentence_that_refuses_it():
    from llmgw.onboard.judge import why_no_room

    assert why_no_room(4, 2 * GB, 0, 1, "guard-1") == (
        "guard-1 has 2.0 GB of memory, and the judge needs 2 GB for it beside the rest (3.0 GB in all)")
    assert why_no_room(0, 8 * GB, 0, 1, "guard-1") == "guard-1 reports no CPUs to run the judge on"
    assert why_no_room(4, 8 * GB, 0, 2, "guard-1") is None
