"""Sending a usage export that is read from the store as it is written: the admin API's
`/api/v1/usage/export`, the portal's `/usage.csv` and `/admin/usage.csv`.

The caller reads the first page before the status line, so a store that is
away then is a refusal with a sentence rather than an empty file. Once the
answer has started, a store that goes away cuts the connection without the
closing chunk: the client sees a failed transfer, never a short file that
looks whole.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from llmgw.accounting import EXPORT_PAGE
from llmgw.store import StoreError

log = logging.getLogger("llmgw.exports")


async def send_export(request: web.Request, response: web.StreamResponse, first: bytes,
                      rest: AsyncIterator[bytes], *, what: str) -> web.StreamResponse:
    """Start `response` (its headers already set), write `first` and then `rest` to their end;
    `what` names the export in the log line of a transfer cut off."""
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(first)
    written = 1
    try:
        async for chunk in rest:
            await response.write(chunk)
            written += 1
    except StoreError as e:
        log.warning("%s was cut off after %d pages of %d rows: %s", what, written, EXPORT_PAGE, e)
        if request.transport is not None:
            request.transport.close()  # sends what is buffered, then closes
        return response
    await response.write_eof()
    return response
