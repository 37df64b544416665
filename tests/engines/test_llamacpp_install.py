"""Which llama.cpp server the agent runs when one is already there: no install, no network."""

from __future__ import annotations

import os
import stat

import pytest

from llmgw.config.agent import LlamaCppSettings
from llmgw.engines.llamacpp_install import (
    LlamaServerUnavailable,
    engine_dir,
    ensure_llama_server,
)


def fake_llama_server(where, version_line="version: 6123 (a1b2c3d)"):
    """A llama-server that only knows --version, as the real one prints it (on stderr)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "llama-server"
    path.write_text(f"#!/bin/sh\necho '{version_line}' >&2\necho 'built with cc for x86_64' >&2\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


async def test_the_program_agent_yaml_names_is_run_and_nothing_is_installed(tmp_path):
    program = fake_llama_server(tmp_path / "opt")
    data = tmp_path / "data"

    server = await ensure_llama_server(data, LlamaCppSettings(binary=str(program)))

    assert server.argv_prefix == [str(program)]
    assert server.version == "b6123 (a1b2c3d)"
    assert server.origin == "agent.yaml"
    assert not engine_dir(data).exists()


async def test_llama_server_on_path_is_run_when_agent_yaml_names_none(tmp_path, monkeypatch):
    program = fake_llama_server(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    said = []

    server = await ensure_llama_server(tmp_path / "data", LlamaCppSettings(), progress=said.append)

    assert server.argv_prefix == [str(program)]
    assert server.origin == "PATH"
    assert said == []
    assert not engine_dir(tmp_path / "data").exists()


async def test_a_named_program_that_is_not_there_is_refused_naming_the_key(tmp_path):
    with pytest.raises(LlamaServerUnavailable) as refused:
        await ensure_llama_server(tmp_path, LlamaCppSettings(binary="/opt/llama.cpp/bin/llama-server"))

    assert "engines.llamacpp.binary" in str(refused.value)
    assert "/opt/llama.cpp/bin/llama-server" in str(refused.value)
    assert not engine_dir(tmp_path).exists()


async def test_a_program_that_will_not_say_its_version_is_still_run(tmp_path):
    program = fake_llama_server(tmp_path / "opt", version_line="something else")

    server = await ensure_llama_server(tmp_path / "data", LlamaCppSettings(binary=str(program)))

    assert server.argv_prefix == [str(program)]
    assert server.version == "unknown"
