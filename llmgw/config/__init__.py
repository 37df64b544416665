"""Configuration: server.yaml and agent.yaml as dataclasses, loaded strictly.

An unknown key or a bad value is refused naming its full path
("server.yaml: router.cache.max_bytes: expected a size like 256MB, got
"lots""). docs/reference.md is generated from the dataclasses' own field
docstrings (reference.py).
"""

from llmgw.config.agent import AgentConfig, load_agent_config
from llmgw.config.loader import (
    ConfigError,
    from_dict,
    get_path,
    load_file,
    set_path,
    to_dict,
    unset_path,
)
from llmgw.config.server import (
    CLUSTER_KEYS,
    MACHINE_KEYS,
    PORTAL_LANGUAGES,
    AuthSettings,
    ClusterSettings,
    PortalSettings,
    ServerConfig,
    SignupSettings,
    cluster_keys_in,
    cluster_part,
    load_server_config,
)
from llmgw.config.types import Address, AddressOrOff, Duration, Size

__all__ = [
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
    "ServerConfig",
    "SignupSettings",
    "Size",
    "cluster_keys_in",
    "cluster_part",
    "from_dict",
    "get_path",
    "load_agent_config",
    "load_file",
    "load_server_config",
    "set_path",
    "to_dict",
    "unset_path",
]
