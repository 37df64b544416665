"""`llmgw ctl fabric-test`: the link between two real agents on loopback, measured through a real control plane."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.agent import fabric
from llmgw.protocol import FabricTest
from tests.support.agents import AgentProcess
from tests.support.waiting import wait_for


def test_the_link_between_two_nodes_is_measured_in_round_trips_and_bytes(server, tmp_path):
    agents = [AgentProcess(tmp_path, name).join(server).start() for name in ("node-a", "node-b")]
    try:
        wait_for(lambda: len(server.ctl_json("ctl", "nodes")) == 2, timeout=30)
        measured = server.ctl_json("ctl", "fabric-test", "node-a", "node-b", "--size", "64MB", "--pings", "10")
        assert (measured["from"], measured["to"], measured["bytes"], measured["pings"]) == (
            "node-a", "node-b", 64 << 20, 10)
        assert measured["address"].startswith("127.0.0.1:")
        assert measured["bytes_per_second"] > 0 and 0 < measured["latency_ms"]["median"] < 1000

        shown = server.ctl("ctl", "fabric-test", "node-b", "node-a", "--size", "8MB")
        assert shown.returncode == 0, shown.stderr
        assert "node-b <- node-a" in shown.stdout and " Gb/s (" in shown.stdout and "ms median of 20" in shown.stdout

        same = server.ctl("ctl", "fabric-test", "node-a", "node-a")
        assert same.returncode == 1 and "name two nodes" in same.stderr
        nowhere = server.ctl("ctl", "fabric-test", "node-a", "node-z")
        assert nowhere.returncode == 1 and "there is no node node-z" in nowhere.stderr
    finally:
        for agent in agents:
            agent.stop()


async def test_a_connection_without_the_tests_token_gets_nothing_and_takes_the_test_away():
    answer, task = await fabric.serve(FabricTest("t1", "serve", token="right-token"), "127.0.0.1")
    try:
        refused = await fabric.probe(FabricTest("t1", "probe", token="wrong-token", address=answer.address,
                                                bytes=1 << 20, pings=1))
        assert refused.error and not refused.bytes
        # One connection a test: the right token afterwards is too late.
        late = await fabric.probe(FabricTest("t1", "probe", token="right-token", address=answer.address,
                                             bytes=1 << 20, pings=1))
        assert late.error
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize("address", ["127.0.0.1:1", "not-an-address"])
async def test_a_probe_that_reaches_nothing_says_where(address):
    result = await fabric.probe(FabricTest("t2", "probe", token="x", address=address, bytes=1, pings=1))
    assert result.error.startswith(f"could not reach {address}")
