"""What a ComfyUI model makes carries its licence: a picture in its PNG text, a mesh in its GLB's asset.extras."""

from __future__ import annotations

import json

from llmgw.config import ComfyUIModel, License
from llmgw.engines import Output
from llmgw.media import encode_png, extras, read_text
from llmgw.router.media.runs import marked
from tests.support.meshes import glb

LICENCE = License(id="tencent-hunyuan-community", commercial=True, excluded_regions=["EU", "GB"],
                  revenue_cap="1M monthly users")


def test_every_output_the_model_makes_carries_its_whole_licence():
    media = ComfyUIModel(output="meshes", license=LICENCE)
    made = [Output("9", "mesh_00001_.glb", "", "3d", glb({"asset": {"version": "2.0"}})),
            Output("5", "concept_00001_.png", "", "images", encode_png(8, 8, b"\x10" * 192)),
            Output("7", "notes.txt", "", "text", b"plain words")]
    mesh, picture, notes = marked(made, "hunyuan3d", media)
    whole = {"id": "tencent-hunyuan-community", "commercial": True, "excluded_regions": ["EU", "GB"],
             "revenue_cap": "1M monthly users"}
    assert extras(mesh.data) == {"source": "llmgw model hunyuan3d", "license": whole}
    assert json.loads(read_text(picture.data)["license"]) == whole
    assert notes.data == b"plain words"  # a file with nowhere to put it is answered as it came
