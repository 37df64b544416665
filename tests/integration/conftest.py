"""Fixtures for tests that run real llmgw processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.servers import Server, SimEngine
from tests.support.sshd import Sshd

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    """Every test in this directory carries the `integration` marker (setup.cfg), so `-m` can pick them."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def sshd(tmp_path):
    """Debian's sshd on a loopback port, logged in to as root with its client_key (tests/support/sshd.py)."""
    daemon = Sshd(tmp_path).start()
    yield daemon
    daemon.stop()


@pytest.fixture
def servers(tmp_path, init_copies):
    """Make servers with servers(name, store=…); every one started is stopped after the test."""
    made: list[Server] = []

    def make(name: str = "cp1", store: str | None = None, config: str | None = None) -> Server:
        server = Server(tmp_path, name, store, config, copies=init_copies)
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


@pytest.fixture
def engines(tmp_path):
    """Start sim-engines with engines(model, *flags); each is stopped after the test."""
    made: list[SimEngine] = []

    def make(model: str = "sim", *flags: str) -> SimEngine:
        engine = SimEngine(tmp_path, model, *flags).start()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.stop()
