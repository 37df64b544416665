"""When this control plane's certificates run out, for Prometheus: its agent-port certificate and the cluster CA.

The agent-port certificate is renewed by the control plane 30 days before
it runs out (trust/authority.py); one that gets within 14 days has not been,
and the packaged alert (LlmgwCertificateExpiring) says so. Every control
plane exports its own: each has its own certificate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily


class CertificateCollector:
    def __init__(self, expiries: Callable[[], dict[str, float]]) -> None:
        self._expiries = expiries  # certificate -> when it runs out, seconds since the epoch

    def collect(self) -> Iterator[GaugeMetricFamily]:
        found = self._expiries()
        if not found:
            return
        expiry = GaugeMetricFamily("llmgw_certificate_expiry_timestamp_seconds",
                                   "When each certificate of this control plane runs out (seconds since the epoch)",
                                   labels=["certificate"])
        for name, at in sorted(found.items()):
            expiry.add_metric([name], at)
        yield expiry
