import pytest

from llmgw.config import AgentConfig, ConfigError, from_dict, load_agent_config


def refused(data) -> str:
    with pytest.raises(ConfigError) as err:
        from_dict(AgentConfig, data)
    return str(err.value)


def test_an_empty_agent_file_gives_the_defaults(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("")
    cfg = load_agent_config(str(path))
    assert cfg == AgentConfig()
    assert cfg.cache_dir == "/var/cache/llmgw/weights"
    assert cfg.discovery.dcgm_exporter == "http://127.0.0.1:9400/metrics"


def test_an_agent_file_is_read_into_its_blocks(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(
        "name: gpu1\n"
        "control_planes: [10.0.0.5:7443, 10.0.0.6:7443]\n"
        "discovery:\n  skip_gpus: true\n  dcgm_exporter: off\n"
        "engines:\n  disabled: [vllm]\n  llamacpp:\n    binary: /opt/llama/llama-server\n"
    )
    cfg = load_agent_config(str(path))
    assert cfg.node_name == "gpu1"
    assert cfg.control_planes == ["10.0.0.5:7443", "10.0.0.6:7443"]
    assert cfg.discovery.skip_gpus is True
    assert cfg.discovery.dcgm_exporter == "off"
    assert cfg.engines.llamacpp.binary == "/opt/llama/llama-server"


def test_a_control_plane_without_a_port_is_refused():
    assert refused({"control_planes": ["10.0.0.5"]}) == (
        'control_planes[0]: expected a control plane\'s address like 10.0.0.5:7443, got "10.0.0.5"'
    )


def test_a_misspelt_engine_to_disable_is_refused_with_the_nearest_name():
    assert refused({"engines": {"disabled": ["vlm"]}}) == (
        'engines.disabled[0]: unknown engine "vlm"; did you mean vllm?')


def test_a_typod_agent_key_names_the_nearest_one():
    assert refused({"discovery": {"skip_gpu": True}}) == (
        "discovery.skip_gpu: unknown key; did you mean discovery.skip_gpus?")


def test_a_dcgm_exporter_that_is_not_a_url_is_refused():
    assert refused({"discovery": {"dcgm_exporter": "127.0.0.1:9400"}}).startswith(
        "discovery.dcgm_exporter: expected an http:// URL"
    )
