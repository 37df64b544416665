"""The node's overview's rows for a machine with cards, from the agent's files as it writes them."""

from __future__ import annotations

import time

from llmgw.agent.statefile import AgentState
from llmgw.agent.supervisor.records import ShardRecord
from llmgw.config import AgentConfig
from llmgw.console.node import NodeReading, node_rows


def _text(rows) -> str:
    def flat(row) -> str:
        if isinstance(row, str):
            return row
        if isinstance(row, tuple):
            return row[1]
        return "".join(flat(part) for part in row)

    return "\n".join(flat(row) for row in rows)


def test_each_card_shows_how_busy_its_memory_its_heat_and_the_models_on_it():
    now = time.time()
    state = AgentState(pid=1, version="0.1.0", node="gpu-1", node_id="node_1", started_at=now - 120,
                       leader="10.0.0.5:7443", since=now - 100, control_planes=["10.0.0.5:7443"],
                       gpus=[{"index": 0, "name": "NVIDIA H200", "memory_mb": 143771, "utilization_percent": 45.0,
                              "memory_used_mb": 81920, "temperature_c": 61.0},
                             {"index": 1, "name": "NVIDIA H200", "memory_mb": 143771}],
                       shard_gpus={"r_1": [0]}, written_at=now)
    record = ShardRecord(shard_id="r_1", pid=99, pgid=99, create_time=now - 60, command=["/opt/vllm/bin/vllm"],
                         port=8001, model="qwen", started_at=now - 60)

    text = _text(node_rows(NodeReading("/etc/llmgw/agent.yaml", AgentConfig(name="gpu-1"), state, True,
                                       [("10.0.0.5:7443", True)], [(record, True)], [], [], now)))

    assert "GPU 0  NVIDIA H200  140.4G, 45% busy, 80.0G used, 61°C  models: qwen" in text
    assert "GPU 1  NVIDIA H200  140.4G\n" in text + "\n"  # not yet sampled: no figures, no models
    assert "running (pid 1) for 2m 0s; connected to 10.0.0.5:7443 for 1m 40s" in text
    assert "r_1  qwen  vllm  port 8001  pid 99  for 1m 0s" in text
