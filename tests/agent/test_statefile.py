"""The agent's own files for the node's overview: its state, and its warnings of the last hour."""

from __future__ import annotations

import json
import logging

from llmgw.agent import statefile
from llmgw.agent.statefile import AgentState, WarningsFile, read_state, recent_warnings, write_state


def test_the_state_written_is_the_state_read_back(tmp_path):
    write_state(str(tmp_path), AgentState(pid=42, version="1.2.3", node="n", node_id="id", started_at=10.0,
                                          leader="127.0.0.1:7443", since=11.0, control_planes=["127.0.0.1:7443"]))

    state = read_state(str(tmp_path))

    assert state is not None and (state.pid, state.leader, state.control_planes) == (42, "127.0.0.1:7443",
                                                                                    ["127.0.0.1:7443"])
    assert state.written_at > 0
    assert (tmp_path / statefile.STATE).stat().st_mode & 0o777 == 0o600


def test_no_state_file_or_a_broken_one_reads_as_none(tmp_path):
    assert read_state(str(tmp_path)) is None
    (tmp_path / statefile.STATE).write_text("{not json")
    assert read_state(str(tmp_path)) is None


def test_warnings_and_errors_are_kept_and_info_is_not(tmp_path):
    logger = logging.getLogger("test.statefile.kept")
    logger.propagate = False
    handler = WarningsFile(str(tmp_path))
    logger.addHandler(handler)
    try:
        logger.info("all is well")
        logger.warning("a record is not one")
        logger.error("an engine could not start")
    finally:
        logger.removeHandler(handler)

    found = recent_warnings(str(tmp_path))

    assert [(w["level"], w["text"]) for w in found] == [("warning", "test.statefile.kept: a record is not one"),
                                                        ("error", "test.statefile.kept: an engine could not start")]


def test_only_the_last_hour_is_shown(tmp_path):
    (tmp_path / statefile.WARNINGS).write_text(
        json.dumps({"at": 1000.0, "level": "warning", "text": "old"}) + "\n"
        + json.dumps({"at": 5000.0, "level": "warning", "text": "new"}) + "\nnot json\n")

    assert [w["text"] for w in recent_warnings(str(tmp_path), now=5000.0 + 60)] == ["new"]


def test_the_warnings_file_is_cut_to_its_newer_half_past_its_bound(tmp_path):
    logger = logging.getLogger("test.statefile.bound")
    logger.propagate = False
    handler = WarningsFile(str(tmp_path), max_bytes=2000)
    logger.addHandler(handler)
    try:
        for i in range(100):
            logger.warning("warning number %d", i)
    finally:
        logger.removeHandler(handler)

    size = (tmp_path / statefile.WARNINGS).stat().st_size
    texts = [w["text"] for w in recent_warnings(str(tmp_path))]
    assert size <= 2000 + 100
    assert texts[-1].endswith("warning number 99") and not any(t.endswith("number 0") for t in texts)
