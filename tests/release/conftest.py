"""One real llmgw.pyz for the release tests, built once per session."""

from __future__ import annotations

import pytest

from tests.support.programs import build_program


@pytest.fixture(scope="session")
def program(tmp_path_factory):
    return build_program(tmp_path_factory.mktemp("program"))
