"""Each GPU's work as Prometheus sees it, per node and card, from the heartbeats the leader already holds.

Every heartbeat (5 s) carries each card's readings (llmgw.agent.discovery:
NVML, or nvidia-smi where NVML cannot be loaded, and GPM or a dcgm-exporter
for the SMs); the card's memory is from the node's Register. Nothing here
asks a node: a scrape reads what the last heartbeat said.

Only a connected node's cards are exported. A node whose link went stops
being shown at the next scrape rather than repeating its last reading, so a
dashboard never draws a lost card as busy.

What is not known is left out, never sent as 0 (the protocol's rule): the
temperature, power and limit of a card whose driver did not say, every
figure but memory of a MIG instance (no driver measures those per
instance), and SM activity on a card without GPM or an exporter.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily

from llmgw.control.agentsvc import Node

MIB = 1024 * 1024
LABELS = ["node", "gpu"]


def _percent(value: float) -> float:
    """A percentage as the 0-1 ratio Prometheus names _ratio."""
    return round(value / 100, 4)


def gpu_metrics(nodes: Iterable[Node]) -> list[GaugeMetricFamily]:
    """The GPU families, each announced even with no card in it, so a dashboard's queries always find the name."""
    util = GaugeMetricFamily("llmgw_gpu_utilization_ratio", "Share of the last sample period a kernel ran on the "
                             "card (0-1); not how much of the chip worked: see llmgw_gpu_sm_active_ratio",
                             labels=LABELS)
    used = GaugeMetricFamily("llmgw_gpu_memory_used_bytes", "GPU memory in use, by any process", labels=LABELS)
    total = GaugeMetricFamily("llmgw_gpu_memory_total_bytes", "GPU memory the card (or MIG instance) has",
                              labels=LABELS)
    power = GaugeMetricFamily("llmgw_gpu_power_watts", "Power the card draws now", labels=LABELS)
    limit = GaugeMetricFamily("llmgw_gpu_power_limit_watts", "The power limit the driver holds the card to",
                              labels=LABELS)
    temp = GaugeMetricFamily("llmgw_gpu_temperature_celsius", "The card's core temperature", labels=LABELS)
    sm_active = GaugeMetricFamily("llmgw_gpu_sm_active_ratio", "Share of the SMs with work (0-1), where the card "
                                  "has GPM or a dcgm-exporter reads it", labels=LABELS)
    sm_occupancy = GaugeMetricFamily("llmgw_gpu_sm_occupancy_ratio", "Warps resident on the SMs against the most "
                                     "they hold (0-1), where GPM or a dcgm-exporter reads it", labels=LABELS)
    tensor = GaugeMetricFamily("llmgw_gpu_tensor_active_ratio", "Share of time the tensor cores worked (0-1), where "
                               "GPM or a dcgm-exporter reads it", labels=LABELS)
    dram = GaugeMetricFamily("llmgw_gpu_dram_active_ratio", "Share of time the memory interface was busy (0-1), "
                             "where GPM or a dcgm-exporter reads it", labels=LABELS)
    for node in nodes:
        beat = node.heartbeat
        if not node.connected or beat is None:
            continue
        cards = {g.index: g for g in node.register.gpus}
        for s in beat.gpus:
            card = cards.get(s.index)
            labels = [node.name, str(s.index)]
            used.add_metric(labels, s.memory_used_mb * MIB)
            if card is not None and card.memory_mb:
                total.add_metric(labels, card.memory_mb * MIB)
            if card is not None and card.mig is not None:
                continue
            util.add_metric(labels, _percent(s.utilization_percent))
            if s.power_w > 0:
                power.add_metric(labels, s.power_w)
            if s.power_limit_w > 0:
                limit.add_metric(labels, s.power_limit_w)
            if s.temperature_c > 0:
                temp.add_metric(labels, s.temperature_c)
            if s.has_profile:
                for family, value in ((sm_active, s.sm_active_percent), (sm_occupancy, s.sm_occupancy_percent),
                                      (tensor, s.tensor_active_percent), (dram, s.dram_active_percent)):
                    if value >= 0:
                        family.add_metric(labels, _percent(value))
    return [util, used, total, power, limit, temp, sm_active, sm_occupancy, tensor, dram]
