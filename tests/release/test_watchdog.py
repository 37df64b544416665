"""The watchdog a machine leaves behind when it upgrades itself: it waits for the new program's word, or puts the
previous one back."""

from __future__ import annotations

import time

from llmgw.release import confirm, confirmed, previous_of, watch


def machine(tmp_path):
    target = tmp_path / "llmgw"
    target.write_bytes(b"new program")
    previous_of(target).write_bytes(b"previous program")
    return target


def test_a_new_program_that_confirms_it_serves_is_left_in_place(tmp_path):
    target = machine(tmp_path)
    since = time.time()
    confirm(tmp_path, "0.2.0")
    said: list[str] = []
    restarted: list[bool] = []
    assert watch(target, "0.2.0", str(tmp_path), 5.0, since, lambda: restarted.append(True), said.append)
    assert target.read_bytes() == b"new program" and not restarted
    assert said == ["llmgw 0.2.0 confirmed it is up; the watchdog is done"]


def test_a_confirmation_from_before_the_upgrade_or_of_another_version_does_not_count(tmp_path):
    confirm(tmp_path, "0.1.0")
    assert not confirmed(tmp_path, "0.2.0", 0.0)
    confirm(tmp_path, "0.2.0")
    assert not confirmed(tmp_path, "0.2.0", time.time() + 60)
    assert confirmed(tmp_path, "0.2.0", 0.0)


def test_a_new_program_that_never_confirms_is_replaced_by_the_previous_and_the_service_restarted(tmp_path):
    target = machine(tmp_path)
    confirm(tmp_path, "0.1.0")  # the old program's word, from before: not the new one's
    said: list[str] = []
    restarted: list[bool] = []
    assert not watch(target, "0.2.0", str(tmp_path), 0.2, time.time(), lambda: restarted.append(True), said.append)
    assert target.read_bytes() == b"previous program" and restarted == [True]
    assert "did not confirm it is up within 0.2 s: the previous program is back" in said[-1]


def test_with_no_previous_program_the_watchdog_says_to_start_the_service_by_hand(tmp_path):
    target = tmp_path / "llmgw"
    target.write_bytes(b"new program")
    said: list[str] = []
    assert not watch(target, "0.2.0", str(tmp_path), 0.1, time.time(), None, said.append)
    assert target.read_bytes() == b"new program"
    assert said[-1].endswith("there is no llmgw.previous to put back; start the machine's service by hand")
