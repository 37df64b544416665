"""The cluster's trust: its CA, join codes, and mutual TLS on the agent port (docs/cluster.md).

What the rest of llmgw uses:

- `ClusterTrust` — a control plane's side: `start()` opens or makes the CA
  and certifies the agent port; `ssl_context` serves it; `new_join_code()`
  for `llmgw node add`; `sign_mirror()` for `llmgw mirror add-peer`;
  `problem` says why agents are refused, if they are.
- `make_agent_app(trust, mounts)` — the agent port's aiohttp app, with the
  join routes and a middleware that refuses (403) any other request whose
  connection has no verified cluster certificate. Mount agents' streams
  with a function in `mounts`.
- `peer_node_id(request)`, `peer_control_plane(request)`, `peer_mirror(request)`
  — who a request came from, read from the certificate TLS verified.
- `client_ssl_context(agent_data_dir)`, `node_identity(agent_data_dir)` —
  a node's side, once `llmgw join` has written its files.
- `server_ssl_context(cert, key, ca_pem)` — the agent port's TLS context.
- `join(code, data_dir, config)` — `llmgw join` itself.
- `mirror_key()`, `mirror_certificate_fits()`, `certificate_identity()` — a
  model mirror's own certificate on a machine of its own (`mirror add-peer`).
"""

from llmgw.trust.agentport import OPEN_PATHS, PEER, make_agent_app
from llmgw.trust.authority import DEFAULT_JOIN_TTL, ClusterTrust, JoinRefused, agent_address, machine_hosts
from llmgw.trust.code import JoinCode, decode_code
from llmgw.trust.joining import JoinResult, join
from llmgw.trust.masterkey import FILE_NAME, MasterKey, TrustError, ensure_master_key, read_master_key
from llmgw.trust.mirrorcert import certificate_identity, mirror_certificate_fits, mirror_key
from llmgw.trust.tls import (
    NodeIdentity,
    client_ssl_context,
    control_plane_named,
    node_identity,
    peer_control_plane,
    peer_identity,
    peer_mirror,
    peer_node_id,
    server_ssl_context,
)

__all__ = [
    "ClusterTrust", "JoinCode", "JoinRefused", "JoinResult", "MasterKey", "NodeIdentity", "OPEN_PATHS", "PEER",
    "TrustError", "agent_address", "certificate_identity", "client_ssl_context", "decode_code", "ensure_master_key",
    "join", "make_agent_app", "mirror_certificate_fits", "mirror_key", "node_identity", "peer_control_plane",
    "peer_identity", "peer_mirror", "peer_node_id", "control_plane_named", "read_master_key", "server_ssl_context",
    "DEFAULT_JOIN_TTL", "machine_hosts",
    "FILE_NAME",
]
