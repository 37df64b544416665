"""Fixtures shared by the whole suite.

The store's fixtures: every store test runs twice, on SQLite (a file in the
test's tmp_path) and on PostgreSQL (a database of its own on one throwaway
cluster for the session). The cluster starts only when a test asks for it,
so `-k sqlite` runs without PostgreSQL.
"""

from __future__ import annotations

import pytest

from tests.support.pgcluster import PgCluster
from tests.support.servers import InitCopies

from llmgw.store import open_store

# The browser's fixtures and its --screenshots option, for any test that asks for `browsing`.
pytest_plugins = ("tests.support.browser",)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: fetches or installs something (llama.cpp's server from PyPI, an "
                                       "install over SSH, the zipapp), drives a browser, starts a directory (slapd, "
                                       "an OpenID provider), Patroni or three machines, or watches for more than a "
                                       "minute; `build.py test --quick` (-m 'not slow') leaves these out")
    # The portal's catalogues are compiled, not kept in git: a bare `pytest` (no build.py test) compiles
    # them when a .po is newer, so Turkish pages show Turkish here and in the servers the tests start.
    from llmgw.portal import catalogues

    if catalogues.stale():
        catalogues.compile_all()


@pytest.fixture(scope="session")
def postgres_cluster():
    """A PostgreSQL server of our own for the session, stopped at its end."""
    try:
        cluster = PgCluster()
    except RuntimeError as e:
        # Fail, never skip: a suite that skips PostgreSQL passes while the
        # half of the store that several control planes use goes untested.
        pytest.fail(str(e), pytrace=False)
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="session")
def init_copies(tmp_path_factory) -> InitCopies:
    """`server init` made once a test process for each server.yaml, copied for each server (InitCopies)."""
    return InitCopies(tmp_path_factory.mktemp("init-templates"))


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """The address of a new, empty store of each dialect."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'store' / 'llmgw.db'}"
    return request.getfixturevalue("postgres_cluster").create_database()


@pytest.fixture
async def store(store_url):
    """An opened (migrated) store, closed after the test."""
    opened = await open_store(store_url)
    yield opened
    await opened.close()
