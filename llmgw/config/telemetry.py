"""`telemetry`: where a control plane or an agent sends its traces, and how many it keeps.

The same section in server.yaml (a cluster setting, live on every control
plane) and in agent.yaml (the node's own). docs/observability.md says what
is traced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from llmgw.config.loader import Invalid
from llmgw.config.types import describe
from llmgw.errors import N_

__all__ = ["TelemetrySettings"]


@dataclass(frozen=True)
class TelemetrySettings:
    otlp_endpoint: str = ""
    """Where traces are sent, over OTLP/HTTP: an OpenTelemetry collector (or Jaeger, Tempo, Phoenix…) such as
    `http://127.0.0.1:4318`, to which `/v1/traces` is added, or the whole URL when it has a path of its own; never
    with a user name or password in it, which the settings would hold in the clear. Empty traces nothing at all, and
    costs nothing (docs/observability.md)."""

    sample_ratio: float = 1.0
    """The share of requests and replica starts traced, from 0 to 1, decided once for a whole trace: a request whose
    client sent a W3C `traceparent` follows the client's decision, and a node follows its control plane's. 0 traces
    only what such a caller asks for."""

    def validate(self) -> None:
        endpoint = self.otlp_endpoint
        if endpoint:
            parts = urlsplit(endpoint)
            if (parts.scheme not in ("http", "https") or not parts.hostname or endpoint != endpoint.strip()
                    or parts.query or parts.fragment):
                raise Invalid("otlp_endpoint",
                              N_("expected an OTLP/HTTP collector's URL like http://127.0.0.1:4318, or nothing to "
                                 "trace nothing, got {value}"),
                              params={"value": describe(endpoint)})
            if parts.username or parts.password:
                # The settings are stored and shown as they are: a secret there is in the clear.
                raise Invalid("otlp_endpoint",
                              N_("holds a user name or password; the settings are no place for a secret, so give "
                                 "the collector's address alone (one that needs credentials is not supported yet)"))
        ratio = self.sample_ratio
        if math.isnan(ratio) or not 0.0 <= ratio <= 1.0:
            raise Invalid("sample_ratio",
                          N_("must be from 0 to 1, the share of requests traced (0.1 is one in ten), got {value}"),
                          params={"value": describe(ratio)})

    @property
    def traces_url(self) -> str:
        """The URL spans are posted to: the endpoint's own path, or the OTLP/HTTP default /v1/traces."""
        parts = urlsplit(self.otlp_endpoint)
        if parts.path in ("", "/"):
            return self.otlp_endpoint.rstrip("/") + "/v1/traces"
        return self.otlp_endpoint
