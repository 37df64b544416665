"""Provider key files: never one of llmgw's own secrets, never a file others can read, one key alone."""

from __future__ import annotations

import os

import pytest

from llmgw.config.keyfiles import KeyFileRefused, OwnSecrets, check_key_file, own_secrets, read_key_file
from llmgw.config.loader import ConfigError, from_dict
from llmgw.config.server import ServerConfig


@pytest.fixture
def data_dir(tmp_path):
    """A control plane's data directory with its master key, admin token and TLS key, all 0600."""
    d = tmp_path / "data"
    (d / "tls").mkdir(parents=True)
    for name in ("master-key", "admin-token", "tls/agent-port.key", "llmgw.db"):
        (d / name).write_text("c2VjcmV0LW9mLWxsbWd3LW5vdC1hLXByb3ZpZGVyLWtleQ==\n")
        (d / name).chmod(0o600)
    return d


@pytest.fixture
def own(data_dir):
    return own_secrets(ServerConfig(data_dir=str(data_dir), store=f"sqlite:{data_dir / 'llmgw.db'}"))


def secret(path, text="sk-provider-key"):
    path.write_text(text + "\n")
    path.chmod(0o600)
    return str(path)


def test_a_key_file_of_its_owner_alone_is_read(tmp_path, own):
    assert read_key_file(secret(tmp_path / "openai.key"), own) == "sk-provider-key"


@pytest.mark.parametrize("name", ["master-key", "admin-token", "llmgw.db", "tls/agent-port.key"])
def test_llmgws_own_secrets_are_never_read_as_a_provider_key(data_dir, own, name):
    with pytest.raises(KeyFileRefused, match="llmgw's own secrets|where llmgw keeps its own secrets"):
        read_key_file(str(data_dir / name), own)


def test_a_link_to_the_master_key_is_refused_as_the_master_key_is(tmp_path, data_dir, own):
    soft, hard = tmp_path / "soft.key", tmp_path / "hard.key"
    soft.symlink_to(data_dir / "master-key")
    os.link(data_dir / "master-key", hard)
    for path in (soft, hard):
        with pytest.raises(KeyFileRefused, match="own secrets"):
            read_key_file(str(path), own)


def test_a_key_file_others_can_read_is_refused_with_the_chmod_that_fixes_it(tmp_path, own):
    path = secret(tmp_path / "openai.key")
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileRefused, match=f"can be read by others \\(mode 0644\\).*chmod 600 {path}"):
        read_key_file(path, own)


def test_a_pem_key_or_a_document_is_not_taken_for_one_key(tmp_path, own):
    pem = secret(tmp_path / "id.pem", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END PRIVATE KEY-----")
    with pytest.raises(KeyFileRefused, match="the key alone"):
        read_key_file(pem, own)


def test_a_relative_path_a_folder_and_a_device_are_refused(tmp_path, own):
    for path, why in (("openai.key", "not an absolute path"), (str(tmp_path), "not a regular file"),
                      ("/dev/zero", "not a regular file")):
        with pytest.raises(KeyFileRefused, match=why):
            read_key_file(path, own)


def test_a_file_not_on_this_machine_yet_passes_the_settings_by_its_path(tmp_path, own):
    check_key_file(str(tmp_path / "made-later.key"), own)


def test_server_yaml_naming_the_master_key_as_a_provider_key_is_refused_naming_the_key(data_dir):
    doc = {"data_dir": str(data_dir), "models": [{"name": "gpt", "source": "external", "external": {
        "url": "https://api.example.com/v1", "api_key_file": str(data_dir / "master-key")}}]}
    with pytest.raises(ConfigError, match=r"models\[0\]\.external\.api_key_file: .*master-key is one of "
                                          r"llmgw's own secrets"):
        from_dict(ServerConfig, doc)


def test_the_defaults_protect_the_agents_files_on_the_same_machine():
    with pytest.raises(KeyFileRefused, match="/var/lib/llmgw-agent"):
        check_key_file("/var/lib/llmgw-agent/node.key", OwnSecrets())
