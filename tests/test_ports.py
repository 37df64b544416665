"""A port handed to a process that binds it later: never one an outgoing connection can take first."""

from __future__ import annotations

import random
import socket

from llmgw.ports import FIRST, outside_ephemeral, unused_port


def write_range(tmp_path, low: int, high: int) -> str:
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{low}\t{high}\n")
    return str(path)


def test_ports_are_drawn_below_the_ephemeral_range_that_outgoing_connections_use(tmp_path):
    assert outside_ephemeral(write_range(tmp_path, 32768, 60999)) == (FIRST, 32768)


def test_a_machine_whose_ephemeral_range_starts_low_draws_above_it(tmp_path):
    assert outside_ephemeral(write_range(tmp_path, 1024, 49151)) == (49152, 65536)


def test_a_machine_without_the_range_file_assumes_linuxs_default(tmp_path):
    assert outside_ephemeral(str(tmp_path / "absent")) == (FIRST, 32768)


def test_a_port_handed_out_is_outside_the_ephemeral_range_and_can_be_listened_on():
    low, high = outside_ephemeral()
    port = unused_port()
    assert low <= port < high
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_port_someone_listens_on_is_passed_over():
    # The same draw twice: the first port, now held by a listener, is not the second answer.
    first = unused_port(draw=random.Random(7))
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))
        held.listen()
        second = unused_port(draw=random.Random(7))
    assert second != first


def test_a_port_the_caller_refuses_is_passed_over():
    refused: list[int] = []

    def lease(port: int) -> bool:
        if not refused:
            refused.append(port)
            return False
        return True

    port = unused_port(also=lease, draw=random.Random(3))
    assert refused and port != refused[0]
