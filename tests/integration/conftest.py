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


def _initialised(s: Server) -> Server:
    done = s.init()
    assert done.returncode == 0, done.stderr
    s.first_key = next(line.split()[2] for line in done.stdout.splitlines() if "API key" in line)
    return s


@pytest.fixture
def server(servers):
    """One control plane on SQLite, set up and running."""
    return _initialised(servers("cp1")).start()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory, init_copies):
    """`server`, started once for the module's tests that only read, or add things of their own (a key, a
    project under a name no other test of the module uses): 2 s of init and start-up saved a test. A test
    that changes what the others would see (settings, limits above its own key, leadership, a stop) takes
    `server`, a control plane of its own."""
    s = _initialised(Server(tmp_path_factory.mktemp("shared"), "cp1", copies=init_copies))
    try:
        yield s.start()
    finally:
        s.stop()  # a start that failed leaves its process too


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
