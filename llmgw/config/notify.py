"""The notification webhooks' settings: how often the leader looks for deliveries due, and how it retries."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.config.loader import Invalid
from llmgw.config.types import Duration
from llmgw.errors import N_


@dataclass(frozen=True)
class NotifySettings:
    retry_first: Duration = Duration("10s")
    """The first wait before a delivery a webhook did not take (an answer other than 2xx, or no answer) is sent
    again. Each later wait is longer by the same steps as 10s, 30s, 2m, 10m, 30m and then every hour, scaled by
    this (5s gives 5s, 15s, 1m, 5m, 15m, then every half hour). At least 0.05s and at most 10m."""

    give_up_after: Duration = Duration("24h")
    """How long a delivery is tried from when its event happened; after it, the delivery is marked failed and
    `llmgw ctl webhooks deliveries --state failed` lists it. At least 1m."""

    timeout: Duration = Duration("10s")
    """How long one attempt waits for the webhook's answer before it counts as not taken. 1s to 60s."""

    send_every: Duration = Duration("1s")
    """How often the leader looks in the store for deliveries due (a new event is sent at once, without waiting
    for this). More than 0 and at most 30s."""

    def validate(self) -> None:
        if not 0.05 <= self.retry_first <= 600:
            raise Invalid("retry_first", N_("must be between 0.05s and 10m, got {value}"),
                          params={"value": self.retry_first})
        if self.give_up_after < 60:
            raise Invalid("give_up_after", N_("must be at least 1m, got {value}"), params={"value": self.give_up_after})
        if not 1 <= self.timeout <= 60:
            raise Invalid("timeout", N_("must be between 1s and 60s, got {value}"), params={"value": self.timeout})
        if not 0 < self.send_every <= 30:
            raise Invalid("send_every", N_("must be more than 0 and at most 30s, got {value}"),
                          params={"value": self.send_every})
