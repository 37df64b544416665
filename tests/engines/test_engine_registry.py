"""The engine registry: every engine agent.yaml knows, found by name, and asked whether it is installed."""

from __future__ import annotations

import os
import sys

import pytest

import llmgw
from llmgw import engines
from llmgw.config.agent import KNOWN_ENGINES
from llmgw.engines import versions


def test_the_registry_holds_every_engine_agent_yaml_knows():
    assert engines.names() == sorted(KNOWN_ENGINES)
    for name in KNOWN_ENGINES:
        adapter = engines.engine(name)
        assert adapter.name == name
        assert isinstance(adapter, engines.Engine)


def test_an_unknown_engine_is_refused_naming_the_nearest_and_every_one_there_is():
    with pytest.raises(engines.UnknownEngine) as refused:
        engines.engine("vlm")
    assert str(refused.value) == ("unknown engine 'vlm'; did you mean vllm? the engines are comfyui, freetoken, "
                                  "llamacpp, sglang, sim, strata, trtllm, vllm")
    with pytest.raises(engines.EngineError, match="the engines are comfyui"):
        engines.installed("nothing-like-any")


def test_a_sites_own_engine_registers_the_way_the_built_ins_do_and_cannot_take_a_name_twice(monkeypatch):
    class Echo:
        name = "echo-test"
        needs_weights = False

        def validate(self, profile, *, model_path=None):
            pass

        def command(self, profile, *, model_path, port, host, api_key_file=None, binary=None, shard_id=""):
            return engines.Launch(argv=["echo", str(port)], model=profile.model)

        def installed(self, binary=None):
            return "1.0"

    monkeypatch.setattr(engines, "_engines", dict(engines._engines))
    engines.register(Echo())
    assert "echo-test" in engines.names()
    assert engines.installed("echo-test") == "1.0"
    with pytest.raises(engines.EngineError, match="an engine named echo-test is already registered"):
        engines.register(Echo())
    with pytest.raises(engines.EngineError, match="is not an engine"):
        engines.register(object())


def test_the_sim_is_always_installed_at_llmgws_own_version():
    assert engines.installed("sim") == llmgw.__version__


def test_an_engine_program_that_is_not_there_is_not_installed(tmp_path):
    assert engines.installed("llamacpp", str(tmp_path / "llama-server")) is None
    assert engines.installed("freetoken", str(tmp_path / "ft")) is None
    assert engines.installed("trtllm", str(tmp_path / "trtllm-serve")) is None
    assert engines.installed("strata") is None
    assert engines.installed("comfyui") is None


def _script(path, text):
    path.write_text(text)
    os.chmod(path, 0o755)
    return str(path)


def test_llama_server_is_reported_by_the_version_it_prints(tmp_path):
    binary = _script(tmp_path / "llama-server",
                     "#!/bin/sh\necho 'version: 6123 (a1b2c3d)' >&2\necho 'built with cc for x86_64' >&2\n")
    assert engines.installed("llamacpp", binary) == "6123 (a1b2c3d)"
    broken = _script(tmp_path / "broken", "#!/bin/sh\nexit 127\n")
    assert engines.installed("llamacpp", broken) is None


def test_freetoken_is_reported_by_the_last_word_of_its_version(tmp_path):
    ft = _script(tmp_path / "ft", "#!/bin/sh\necho freetoken version 0.2.1\n")
    assert engines.installed("freetoken", ft) == "0.2.1"
    other = _script(tmp_path / "other-ft", "#!/bin/sh\necho 'ft 3.1 (a font tool)'\n")
    assert engines.installed("freetoken", other) is None


def test_a_python_engine_is_found_through_its_environments_interpreter_without_importing_it(tmp_path):
    # pytest stands in for an engine: importable in this interpreter, with
    # a distribution of its own; asked through a script's #! line as the
    # vllm and trtllm-serve console scripts are.
    import pytest as stand_in

    script = _script(tmp_path / "vllm", f"#!{sys.executable}\nprint('never run')\n")
    assert versions.script_python(script) == sys.executable
    assert versions.module_version("pytest", "pytest", sys.executable) == stand_in.__version__
    assert versions.module_version("no_such_engine_module", "nothing", sys.executable) is None
    assert versions.module_version("no_such_engine_module", "nothing") is None
    assert engines.installed("vllm", script) is None  # that interpreter has no vllm module


def test_a_name_that_is_an_interpreter_is_told_from_an_engines_own_program():
    assert versions.is_python("/opt/vllm/bin/python3.12")
    assert versions.is_python("python")
    assert not versions.is_python("/usr/bin/vllm")
    assert not versions.is_python("/usr/bin/python-config")
