"""Configuration: server.yaml and agent.yaml as dataclasses, loaded strictly.

An unknown key or a bad value is refused naming its full path
("server.yaml: router.cache.max_bytes: expected a size like 256MB, got
"lots""). docs/reference.md is generated from the dataclasses' own field
docstrings (reference.py).
"""

from llmgw.config.agent import (
    KNOWN_ENGINES,
    AgentConfig,
    DiscoverySettings,
    LlamaCppSettings,
    PythonEngineSettings,
    WeightsSettings,
    load_agent_config,
)
from llmgw.config.auth import STORE_SECRET_PREFIX, LDAPSettings, OIDCSettings, SCIMSettings
from llmgw.config.bodytemplate import render_body
from llmgw.config.capabilities import CAPABILITIES, Capability
from llmgw.config.guard import GuardSettings, JudgePolicy, Pattern, Policy, Rules, Service
from llmgw.config.hub import HubSettings
from llmgw.config.keyfiles import (
    MASTER_KEY_FILE,
    KeyFileRefused,
    OwnSecrets,
    check_settings_key_files,
    own_secrets,
    read_key_file,
)
from llmgw.config.loader import (
    ConfigError,
    Invalid,
    from_dict,
    get_path,
    load_file,
    parse_yaml,
    set_path,
    to_dict,
    unset_path,
)
from llmgw.config.media import FILE_TYPES, ComfyUIModel, InputValueError, License, WorkflowInput
from llmgw.config.mirror import MirrorConfig, MirrorSettings, check_mirror_url, load_mirror_config
from llmgw.config.notify import NotifySettings
from llmgw.config.router import AdmissionSettings, ModelSettings, Price, RouterSettings, Timeouts
from llmgw.config.server import (
    CLUSTER_KEYS,
    MACHINE_KEYS,
    PORTAL_LANGUAGES,
    SYSTEM_CONFIG,
    AuthSettings,
    ClusterSettings,
    PortalSettings,
    PresetSettings,
    ServerConfig,
    SignupSettings,
    cluster_keys_in,
    cluster_part,
    load_server_config,
)
from llmgw.config.storeaddress import postgres_hosts, redact_url
from llmgw.config.targets import address_refusal, host_refusal
from llmgw.config.telemetry import TelemetrySettings
from llmgw.config.types import Address, AddressOrOff, Duration, Size

__all__ = [
    "FILE_TYPES",
    "ComfyUIModel",
    "InputValueError",
    "License",
    "WorkflowInput",
    "Address",
    "AddressOrOff",
    "AgentConfig",
    "AuthSettings",
    "CLUSTER_KEYS",
    "ClusterSettings",
    "ConfigError",
    "Duration",
    "MACHINE_KEYS",
    "PORTAL_LANGUAGES",
    "PortalSettings",
    "PresetSettings",
    "ServerConfig",
    "SignupSettings",
    "Size",
    "cluster_keys_in",
    "cluster_part",
    "from_dict",
    "get_path",
    "load_agent_config",
    "load_mirror_config",
    "check_mirror_url",
    "load_file",
    "load_server_config",
    "set_path",
    "to_dict",
    "unset_path",
    "DiscoverySettings",
    "KNOWN_ENGINES",
    "LlamaCppSettings",
    "PythonEngineSettings",
    "WeightsSettings",
    "LDAPSettings",
    "OIDCSettings",
    "SCIMSettings",
    "STORE_SECRET_PREFIX",
    "render_body",
    "CAPABILITIES",
    "Capability",
    "GuardSettings",
    "JudgePolicy",
    "Pattern",
    "Policy",
    "Rules",
    "Service",
    "KeyFileRefused",
    "MASTER_KEY_FILE",
    "OwnSecrets",
    "check_settings_key_files",
    "own_secrets",
    "read_key_file",
    "Invalid",
    "parse_yaml",
    "HubSettings",
    "MirrorConfig",
    "MirrorSettings",
    "NotifySettings",
    "AdmissionSettings",
    "ModelSettings",
    "Price",
    "RouterSettings",
    "Timeouts",
    "SYSTEM_CONFIG",
    "postgres_hosts",
    "redact_url",
    "address_refusal",
    "host_refusal",
    "TelemetrySettings",
]
