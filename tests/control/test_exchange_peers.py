"""The routing exchange takes a control plane's certificate only: a node's, or a model mirror's from the same CA
(`llmgw mirror add-peer`), is refused before anything is read. (The agent port's middleware refuses a mirror's
before any route: tests/trust.)"""

from __future__ import annotations

from unittest import mock

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request

from llmgw.control.exchange import ACTIVITY_PATH, Exchange
from llmgw.trust import peer_control_plane, peer_mirror, peer_node_id


def _request(uri: str | None, path: str = ACTIVITY_PATH):
    transport = mock.Mock()
    peercert = {"subjectAltName": [("IP Address", "127.0.0.1"), ("URI", uri)]} if uri else None
    transport.get_extra_info.side_effect = lambda name, default=None: peercert if name == "peercert" else default
    return make_mocked_request("POST", path, transport=transport)


@pytest.mark.parametrize("uri", ["urn:llmgw:mirror:m2", "urn:llmgw:node:node_1", None])
async def test_only_a_control_planes_certificate_takes_part_in_the_routing_exchange(uri):
    plane = mock.Mock()  # never reached: the refusal comes before the plane is asked anything
    answer = await Exchange(plane, counts=mock.Mock()).handle(_request(uri))
    assert answer.status == 403
    assert orjson.loads(answer.body)["error"] == {
        "message": "only a control plane of this cluster takes part in the routing exchange",
        "code": "control_plane_only"}
    assert not plane.mock_calls


def test_a_mirrors_certificate_is_a_mirror_and_neither_a_node_nor_a_control_plane():
    request = _request("urn:llmgw:mirror:m2")
    assert peer_mirror(request) == "m2"
    assert peer_control_plane(request) is None and peer_node_id(request) is None
    cp = _request("urn:llmgw:control-plane:cp1")
    assert peer_control_plane(cp) == "cp1" and peer_mirror(cp) is None
