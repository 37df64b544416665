"""`llmgw server init`: a new store's first administrator and first API key.

The secrets are printed once, to the terminal that asked, and never
written to a log: the store keeps only their hashes, so a lost password or
key is replaced, not recovered.
"""

from __future__ import annotations

import os

from llmgw.account.passwords import new_password
from llmgw.account.service import Accounts, Actor
from llmgw.config.server import ServerConfig
from llmgw.control.token import ensure_token
from llmgw.store import open_store

SYSTEM = Actor("server init", "cli")


async def init_server(cfg: ServerConfig, *, admin_email: str, project: str) -> dict:
    """Set up a store that has no people yet. Returns what to show once,
    or {"already": True, …} without any secret when it was set up before."""
    path = cfg.admin_token_path
    ensure_token(path)
    store = await open_store(cfg.store)
    try:
        accounts = Accounts(store)
        people = await store.count_people()
        if people:
            return {"already": True, "people": people, "admin_token_file": path}
        password = new_password()
        person = await accounts.add_person(SYSTEM, email=admin_email, name="Administrator",
                                           role="admin", password=password)
        view, secret = await accounts.create_key(SYSTEM, name="first key", project=project,
                                                 person_email=person.email)
        return {
            "already": False,
            "administrator": {"email": person.email, "password": password},
            "key": {**view, "key": secret},
            "admin_token_file": os.path.abspath(path),
        }
    finally:
        await store.close()
