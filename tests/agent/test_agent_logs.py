"""What a node answers to the leader's LogsRequest: an engine's output, or the agent's own last lines."""

from __future__ import annotations

import logging
import threading

from llmgw.agent.ownlog import OwnLog
from llmgw.agent.shards import ShardRunner
from llmgw.agent.supervisor.ring import OutputLimits
from llmgw.protocol import LogLine, LogsRequest, StartShard
from llmgw.protocol.messages import EngineProfile


class Supervisor:
    """The supervisor's two reads that logs use: one shard with three lines of output."""

    def get(self, shard_id):
        return object() if shard_id == "r_1" else None

    def logs(self, shard_id, lines):
        return [LogLine(1.0 + i, f"line {i}", "output") for i in range(3)][-lines:]


def runner(own_log=None) -> ShardRunner:
    return ShardRunner(supervisor=Supervisor(), weights=None, engine=None, binary=None, engines={}, own_log=own_log)


async def test_a_shards_last_lines_are_answered_and_an_unknown_shard_is_named():
    answer = await runner().logs(LogsRequest("q1", "r_1", 2))
    assert [line.text for line in answer.lines] == ["line 1", "line 2"] and not answer.error
    missing = await runner().logs(LogsRequest("q2", "r_9", 2))
    assert missing.error == "no shard r_9 on this node" and missing.lines == []


async def test_a_shard_still_fetching_says_so_rather_than_that_it_is_unknown():
    r = runner()
    r._launch = lambda message: _never()  # the launch is not this test's: the shard stays queued
    await r.start(StartShard("r_2", EngineProfile(model="m", engine="sim")))
    answer = await r.logs(LogsRequest("q", "r_2", 10))
    assert not answer.error and answer.lines[0].text == "not started yet: queued"


async def _never():
    pass


async def test_without_a_source_the_agent_answers_its_own_last_lines():
    own = OwnLog()
    logger = logging.getLogger("llmgw.test.ownlog")
    logger.setLevel(logging.INFO)
    own.attach(logger)
    try:
        logger.info("connected to the leader %s", "10.0.0.1:7443")
        thread = threading.Thread(target=lambda: logger.warning("weights: sha256 differs"))
        thread.start()
        thread.join()
    finally:
        own.detach(logger)
    logger.info("after detaching: not kept")
    answer = await runner(own.lines).logs(LogsRequest("q", "", 200))
    assert [line.text for line in answer.lines] == ["INFO llmgw.test.ownlog: connected to the leader 10.0.0.1:7443",
                                                   "WARNING llmgw.test.ownlog: weights: sha256 differs"]
    assert answer.lines[0].at > 0 and answer.lines[0].stream == "agent"
    assert [line.text for line in (await runner(own.lines).logs(LogsRequest("q", "", 1))).lines] == [
        "WARNING llmgw.test.ownlog: weights: sha256 differs"]


def test_the_agents_own_log_is_bounded_like_an_engines():
    own = OwnLog(OutputLimits(max_lines=3, max_bytes=1 << 20, max_line_bytes=64))
    logger = logging.getLogger("llmgw.test.ownlog.bounded")
    logger.setLevel(logging.INFO)
    own.attach(logger)
    try:
        for i in range(5):
            logger.info("line %d", i)
        logger.info("x" * 200)
    finally:
        own.detach(logger)
    texts = [line.text for line in own.lines(10)]
    assert texts[:2] == ["INFO llmgw.test.ownlog.bounded: line 3", "INFO llmgw.test.ownlog.bounded: line 4"]
    assert texts[2].endswith("bytes cut]") and len(texts) == 3


async def test_a_node_whose_agent_keeps_no_log_of_its_own_points_at_the_journal():
    answer = await runner().logs(LogsRequest("q", "", 10))
    assert answer.error == "the agent's own log is in its journal (journalctl -u llmgw-agent)"


async def test_a_shard_of_an_engine_the_node_does_not_know_fails_with_a_sentence_and_no_traceback(caplog):
    from llmgw import engines

    r = ShardRunner(supervisor=Supervisor(), weights=None, engine=engines.engine, binary=None, engines={})
    with caplog.at_level(logging.ERROR, logger="llmgw.agent.shards"):
        await r._launch(StartShard("r_3", EngineProfile(model="m", engine="vlmm")))
    failed = r.updates.get_nowait()
    assert failed.state == "failed"
    assert "unknown engine 'vlmm'; did you mean vllm?" in failed.message
    assert not [rec for rec in caplog.records if rec.exc_info], "an engine's refusal was logged as a bug"
