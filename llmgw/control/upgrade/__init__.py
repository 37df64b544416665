"""Cluster upgrades (docs/upgrade.md): the plan kept in the store, the leader's drive, each control plane's part.

`Upgrader` (driver.py) runs on every control plane and acts while it leads;
`UpgradeMachine` (machine.py) serves programs and upgrades this control
plane when the driver asks; plan.py makes and reads the plan; start.py is
what the admin API calls to begin, resume or roll back.
"""

from __future__ import annotations

from llmgw.control.upgrade.driver import Upgrader
from llmgw.control.upgrade.machine import UpgradeMachine
from llmgw.control.upgrade.plan import make_plan, rollback_plan, where_it_stands

__all__ = ["Upgrader", "UpgradeMachine", "make_plan", "rollback_plan", "where_it_stands"]
