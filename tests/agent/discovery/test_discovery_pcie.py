"""A card in the wrong slot is said so, with what its link carries and what it could."""

from __future__ import annotations

import pytest

from llmgw.agent.discovery.pcie import gen_of_speed, link_problem, sysfs_bus_id, with_sysfs
from llmgw.protocol.messages import GPU


def card(gen=0, gpu_gen=0, width=0, width_max=0) -> GPU:
    return GPU(index=1, name="NVIDIA H100 80GB HBM3", pcie_gen=gen, pcie_gpu_gen=gpu_gen, pcie_width=width,
               pcie_width_max=width_max)


@pytest.mark.parametrize("gpu, said", [
    # A Quadro RTX 6000 idling at Gen1 whose fastest is Gen3, on all 16 lanes: nothing wrong.
    (card(3, 3, 16, 16), ""),
    (card(4, 4, 8, 16), "x8 of its x16 lanes: 15.8 GB/s where it could have 31.5"),
    (card(4, 5, 16, 16), "PCIe Gen4 of its Gen5: 31.5 GB/s where it could have 63.0"),
    (card(3, 4, 4, 16), "x4 of its x16 lanes and PCIe Gen3 of its Gen4"),
    (card(), ""),  # a driver that says nothing
])
def test_a_card_in_the_wrong_slot_is_said_so(gpu, said):
    got = link_problem(gpu)
    assert (said == "") == (got == "")
    assert said in got
    if got:
        assert got.startswith("GPU 1 (NVIDIA H100 80GB HBM3) is linked at") and "riser" in got


def test_sysfs_names_the_bus_id_and_the_link_speed_its_own_way():
    assert sysfs_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert sysfs_bus_id("nonsense") == ""
    speeds = ("2.5 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "Unknown")
    assert [gen_of_speed(s) for s in speeds] == [1, 3, 4, 5, 0]


def test_a_card_without_a_sysfs_entry_keeps_what_the_driver_said(tmp_path):
    g = card(4, 4, 8, 16)
    with_sysfs(g, "00000000:3B:00.0", str(tmp_path))
    assert (g.pcie_width, g.pcie_width_max) == (8, 16)
