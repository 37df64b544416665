"""ComfyUI workflows with inputs: the built-in ones, a site's own file, and a run's values put in by type."""

from __future__ import annotations

import json

import pytest

from llmgw.config import ComfyUIModel, WorkflowInput
from llmgw.control.catalog import SpecError, load_spec
from llmgw.engines import BUILT_IN, WorkflowError, load_workflow


def test_a_number_input_reaches_comfyui_as_a_number_and_not_as_text():
    flow = load_workflow(ComfyUIModel())
    graph = flow.fill({"prompt": "a red fox", "steps": "4", "width": 512, "cfg": 2.5}, "sdxl.safetensors")
    sampler = graph["3"]["inputs"]
    assert sampler["steps"] == 4 and sampler["cfg"] == 2.5
    assert graph["5"]["inputs"] == {"width": 512, "height": 1024, "batch_size": 1}
    assert graph["4"]["inputs"]["ckpt_name"] == "sdxl.safetensors"
    assert graph["6"]["inputs"]["text"] == "a red fox" and graph["7"]["inputs"]["text"] == ""
    assert isinstance(sampler["seed"], int) and 0 <= sampler["seed"] < 2 ** 64
    # The built-in graph itself is never written to.
    assert BUILT_IN["text-to-image"][0]["3"]["inputs"]["steps"] == "{{steps}}"


def test_a_value_out_of_bounds_or_of_the_wrong_kind_is_refused_naming_the_input():
    flow = load_workflow(ComfyUIModel())
    with pytest.raises(WorkflowError, match=r"^steps: 500 is more than the most, 150$"):
        flow.values({"prompt": "x", "steps": 500})
    with pytest.raises(WorkflowError, match=r"^width: expected a whole number, got"):
        flow.values({"prompt": "x", "width": "wide"})
    with pytest.raises(WorkflowError, match=r"^prompt is required"):
        flow.values({})
    with pytest.raises(WorkflowError, match=r"takes no input colour; it takes batch_size, cfg"):
        flow.values({"prompt": "x", "colour": "red"})


def test_a_seed_given_makes_the_same_graph_twice():
    flow = load_workflow(ComfyUIModel())
    one = flow.fill({"prompt": "a fox", "seed": 7}, "m.safetensors")
    two = flow.fill({"prompt": "a fox", "seed": 7}, "m.safetensors")
    assert one == two and one["3"]["inputs"]["seed"] == 7


def test_a_seed_sent_as_its_digits_is_taken_up_to_two_to_the_64_less_one():
    # The portal's pages send a seed past 2^53 as its digits: a JavaScript number would round it.
    flow = load_workflow(ComfyUIModel())
    assert flow.fill({"prompt": "x", "seed": str(2 ** 64 - 1)}, "m")["3"]["inputs"]["seed"] == 2 ** 64 - 1
    with pytest.raises(WorkflowError, match=r"^seed: a seed is from 0 to 2\^64-1, got 18446744073709551616$"):
        flow.values({"prompt": "x", "seed": str(2 ** 64)})


def test_a_site_workflow_file_takes_its_placeholders_defaults_by_the_declared_type(tmp_path):
    path = tmp_path / "upscale.json"
    path.write_text(json.dumps({
        "1": {"class_type": "LoadImage", "inputs": {"image": "{{picture}}"}},
        "2": {"class_type": "ImageScaleBy", "inputs": {"image": ["1", 0], "scale_by": "{{scale|2}}",
                                                        "upscale_method": "{{method|lanczos}}"}},
        "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "up {{label|x}}"}},
        "4": {"class_type": "Note", "inputs": {"sharpen": "{{sharpen|false}}"}},
    }))
    model = ComfyUIModel(workflow=str(path), inputs={
        "picture": WorkflowInput(type="image", required=True),
        "scale": WorkflowInput(type="number", min=1, max=4),
        "sharpen": WorkflowInput(type="boolean"),
        "method": WorkflowInput(type="choice", choices=["lanczos", "bicubic"])})
    flow = load_workflow(model)
    graph = flow.fill({}, "", files={"picture": "in.png"})
    assert graph["2"]["inputs"]["scale_by"] == 2 and graph["2"]["inputs"]["upscale_method"] == "lanczos"
    # The word false, written as a default, is the boolean (a BOOLEAN input refuses the text).
    assert graph["4"]["inputs"]["sharpen"] is False
    assert graph["3"]["inputs"]["filename_prefix"] == "up x"
    assert graph["1"]["inputs"]["image"] == "in.png"
    with pytest.raises(WorkflowError, match="method: expected one of lanczos, bicubic"):
        flow.values({"method": "nearest", "picture": "file"})


def test_a_workflow_file_missing_or_not_in_the_api_format_is_refused_saying_how_to_save_it(tmp_path):
    with pytest.raises(WorkflowError, match="is not on this control plane; put it on every control plane"):
        load_workflow(ComfyUIModel(workflow=str(tmp_path / "gone.json")))
    ui = tmp_path / "ui.json"
    ui.write_text(json.dumps({"nodes": [], "links": []}))  # what ComfyUI's plain Save writes
    with pytest.raises(WorkflowError, match=r"Export \(API\)"):
        load_workflow(ComfyUIModel(workflow=str(ui)))


def _spec(comfyui: dict | None, engine: str = "comfyui") -> dict:
    doc = {"name": "sdxl", "source": "/models/sdxl.safetensors", "profiles": [{"engine": engine}]}
    if comfyui is not None:
        doc["comfyui"] = comfyui
    return doc


def test_the_catalog_refuses_a_comfyui_model_whose_inputs_and_workflow_disagree(tmp_path):
    with pytest.raises(SpecError, match=r"comfyui\.inputs: the input colour is not used by the workflow"):
        load_spec(_spec({"inputs": {"colour": {"type": "text"}}}))
    flow = tmp_path / "f.json"
    flow.write_text(json.dumps({"9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "{{who}}"}}}))
    with pytest.raises(SpecError, match=r"uses \{\{who\}\}, which is not among its inputs"):
        load_spec(_spec({"workflow": str(flow)}))
    with pytest.raises(SpecError, match="needs comfyui: {workflow: text-to-image}"):
        load_spec(_spec(None))
    with pytest.raises(SpecError, match="only a model whose profiles run comfyui takes a workflow"):
        load_spec(_spec({}, engine="llamacpp"))
    with pytest.raises(SpecError, match=r"comfyui\.inputs\.steps\.default: .*more than the most"):
        load_spec(_spec({"inputs": {"steps": {"type": "integer", "max": 10, "default": 20}}}))


def test_a_picture_model_does_images_and_workflows_and_a_mesh_model_workflows_alone():
    assert load_spec(_spec({})).can() == ("images", "workflows")
    assert load_spec(_spec({"output": "meshes"})).can() == ("workflows",)


def test_the_sampler_and_schedule_are_inputs_a_model_sets_its_own_defaults_for():
    flow = load_workflow(ComfyUIModel())
    sampler = flow.fill({"prompt": "x"}, "m.safetensors")["3"]["inputs"]
    assert (sampler["sampler_name"], sampler["scheduler"]) == ("euler", "normal")
    assert flow.fill({"prompt": "x", "scheduler": "karras"}, "m")["3"]["inputs"]["scheduler"] == "karras"
    with pytest.raises(WorkflowError, match=r"^scheduler: expected one of normal, karras, .*, got"):
        flow.values({"prompt": "x", "scheduler": "fast"})
    flux = load_spec({"name": "f", "source": "/m/f.safetensors", "profiles": [{"engine": "comfyui"}],
                      "comfyui": {"inputs": {"scheduler": {"type": "choice", "choices": ["normal", "simple"],
                                                           "default": "simple"}}}})
    assert load_workflow(flux.comfyui).fill({"prompt": "x"}, "f")["3"]["inputs"]["scheduler"] == "simple"
