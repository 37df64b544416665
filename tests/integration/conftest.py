"""Fixtures for tests that run real llmgw processes."""

from __future__ import annotations

import pytest

from servers import Server


@pytest.fixture
def servers(tmp_path):
    """Make servers with servers(name, store=…); every one started is stopped after the test."""
    made: list[Server] = []

    def make(name: str = "cp1", store: str | None = None, config: str | None = None) -> Server:
        server = Server(tmp_path, name, store, config)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


@pytest.fixture
def server(servers):
    """One control plane on SQLite, set up and running."""
    s = servers("cp1")
    done = s.init()
    assert done.returncode == 0, done.stderr
    s.first_key = next(line.split()[2] for line in done.stdout.splitlines() if "API key" in line)
    return s.start()
