"""A mesh's GLB carries its model's licence in asset.extras, its buffers left as they were."""

from __future__ import annotations

import json
import struct

import pytest

from llmgw.media import extras, is_glb, with_extras
from tests.support.meshes import glb


def test_the_licence_goes_into_asset_extras_and_the_buffers_stay_as_they_were():
    mesh = glb({"asset": {"version": "2.0", "generator": "TripoSR", "extras": {"kept": 1}}, "meshes": [{}]})
    marked = with_extras(mesh, {"license": {"id": "mit", "commercial": True}})
    assert is_glb(marked)
    assert extras(marked) == {"kept": 1, "license": {"id": "mit", "commercial": True}}
    version, length = struct.unpack_from("<II", marked, 4)
    assert version == 2 and length == len(marked)
    size, _ = struct.unpack_from("<II", marked, 12)
    assert size % 4 == 0 and json.loads(marked[20:20 + size])["asset"]["generator"] == "TripoSR"
    assert marked.endswith(struct.pack("<II", 4, 0x004E4942) + b"\x01\x02\x03\x04")


def test_what_is_not_a_glb_is_refused_with_a_sentence():
    with pytest.raises(ValueError, match="not a GLB"):
        with_extras(b"\x89PNG\r\n\x1a\n" + b"\0" * 20, {})
    broken = bytearray(glb({"asset": {}}))
    broken[8:12] = struct.pack("<I", 999)
    with pytest.raises(ValueError, match="a glTF 2.0 GLB of"):
        with_extras(bytes(broken), {})
