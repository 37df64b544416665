"""Fixtures shared by the whole suite.

The store's fixtures: every store test runs twice, on SQLite (a file in the
test's tmp_path) and on PostgreSQL (a database of its own on one throwaway
cluster for the session). The cluster starts only when a test asks for it,
so `-k sqlite` runs without PostgreSQL.

Each test's store is a real, fully migrated one, but the migrations run once
a session (once per xdist worker, each with its own temporary directory and
cluster) and each test gets a copy: migrating took 0.2 s on SQLite and 1 s on
PostgreSQL, more than most store tests themselves. `new_store_url` is the
empty store, for the tests of migrating itself.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from llmgw.store import open_store
from tests.support.pgcluster import PgCluster
from tests.support.pyz import prune
from tests.support.schedule import LongestFirstScheduling, measured_slow
from tests.support.servers import InitCopies

# The browser's fixtures and its --screenshots option, for any test that asks for `browsing`.
pytest_plugins = ("tests.support.browser",)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: fetches or installs something (llama.cpp's server from PyPI, an "
                                       "install over SSH, the zipapp), drives a browser, starts a directory (slapd, "
                                       "an OpenID provider), Patroni or three machines, or watches for more than a "
                                       "minute; and every test tests/measured_slow.txt lists (1 s or more in a "
                                       "whole run); `build.py test --quick` (-m 'not slow') leaves these out")
    config.addinivalue_line("markers", "in_order: the module's tests are one story on one shared system (an "
                                       "upgrade, then its rollback) and run in the order written, while the "
                                       "modules around it are shuffled; give a reason beside the mark")
    # The portal's catalogues are compiled, not kept in git: a bare `pytest` (no build.py test) compiles
    # them when a .po is newer, so Turkish pages show Turkish here and in the servers the tests start.
    from llmgw.portal import catalogues

    if catalogues.stale():
        catalogues.compile_all()
    config.stash[_MEASURED_SLOW] = measured_slow()
    # Every llmgw.pyz the suite runs with this environment (the archive's own smoke test in `build.py dist`,
    # among others) unpacks itself once per build, and each run of the suite builds a new one: in the user's
    # ~/.cache/llmgw they were never removed (84 folders, 1 GB, on this project's machine after a day). The
    # suite's own folder instead, rid of what no run touched for two days.
    os.environ.setdefault("LLMGW_PYZ_CACHE", str(prune(Path(tempfile.gettempdir()) / f"llmgw-tests-pyz-{os.getuid()}")))


_MEASURED_SLOW = pytest.StashKey[dict[str, float]]()


def pytest_itemcollected(item):
    # Marked here, before -m reads the marks, as a `slow` written on the test would be.
    if item.nodeid in item.config.stash[_MEASURED_SLOW]:
        item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config, items):
    """Put back the written order inside each module marked `in_order`, in the places pytest-randomly gave
    its tests (whose own wrapper has shuffled them by now), so that a seed still replays the whole run."""
    slots: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.get_closest_marker("in_order") is not None:
            slots.setdefault(item.nodeid.split("::", 1)[0], []).append(index)
    for indices in slots.values():
        written = sorted((items[i] for i in indices), key=lambda item: item.location[1])
        for index, item in zip(indices, written, strict=True):
            items[index] = item


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
def dialect(request) -> str:
    """Which store a test runs on; its id ([sqlite], [postgresql]) is what `-k` selects."""
    return request.param


@pytest.fixture
def new_store_url(dialect, request, tmp_path) -> str:
    """The address of a new, empty store: opening it runs every migration."""
    if dialect == "sqlite":
        yield f"sqlite:{tmp_path / 'store' / 'llmgw.db'}"
        return
    cluster = request.getfixturevalue("postgres_cluster")
    url = cluster.create_database()
    yield url
    cluster.drop_database(url.rsplit("/", 1)[1])


async def _migrate(url: str) -> None:
    opened = await open_store(url)
    await opened.close()


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory) -> str:
    """A folder holding a SQLite store migrated once this session, closed (its WAL folded into the file)."""
    folder = tmp_path_factory.mktemp(f"migrated-store-{_worker()}")
    # A sync fixture, set up outside any test's event loop.
    asyncio.run(_migrate(f"sqlite:{folder / 'llmgw.db'}"))
    return str(folder)


@pytest.fixture(scope="session")
def _migrated_postgres(postgres_cluster) -> str:
    """The name of a database migrated once this session, closed, for CREATE DATABASE … TEMPLATE."""
    name = f"migrated_{_worker()}"
    asyncio.run(_migrate(postgres_cluster.create_database(name)))
    return name


@pytest.fixture
def store_url(dialect, request, tmp_path) -> str:
    """The address of a new, migrated store of each dialect, a copy of the one migrated this session."""
    if dialect == "sqlite":
        folder = tmp_path / "store"
        shutil.copytree(request.getfixturevalue("_migrated_sqlite"), folder)
        yield f"sqlite:{folder / 'llmgw.db'}"
        return
    cluster = request.getfixturevalue("postgres_cluster")
    template = request.getfixturevalue("_migrated_postgres")
    url = cluster.copy_of(template)
    yield url
    cluster.give_back(url, template)


@pytest.fixture
async def store(store_url):
    """The opened store at `store_url`, closed after the test."""
    opened = await open_store(store_url)
    yield opened
    await opened.close()


def pytest_xdist_make_scheduler(config, log):
    """The parallel phase's `--dist loadfile`, starting llmgw.pyz's build first (tests/support/schedule.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    scheduler = LongestFirstScheduling(config, log, measured=config.stash[_MEASURED_SLOW])
    config.stash[_SCHEDULER] = scheduler
    return scheduler


_SCHEDULER = pytest.StashKey[LongestFirstScheduling]()


def pytest_sessionfinish(session):
    scheduler = session.config.stash.get(_SCHEDULER, None)
    if scheduler is not None:
        scheduler.stop_build()
