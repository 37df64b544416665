"""A failed connection said in a few words (issue 11, item 10)."""

from __future__ import annotations

import ssl

import aiohttp
import pytest

from llmgw.connecterror import connect_failure
from tests.support.pgcluster import free_port


async def test_a_refused_https_connection_is_said_without_the_ssl_contexts_repr():
    # As a standby posts to a leader that has just stopped.
    port = free_port()  # leased: nothing listens there, so the call is made and refused
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorError) as failed:
            await session.post(f"https://127.0.0.1:{port}/activity", ssl=ssl.create_default_context())
    assert "SSLContext" in str(failed.value)  # aiohttp's own sentence, which went into the log
    assert connect_failure(failed.value) == "cannot connect (Connection refused)"
