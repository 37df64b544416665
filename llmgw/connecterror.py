"""A failed connection as a few words, not aiohttp's sentence.

aiohttp's ClientConnectorError reads "Cannot connect to host 10.0.0.5:7443
ssl:<ssl.SSLContext object at 0x7f…> [Connect call failed (…)]": the SSL
context's repr went into the log at every stop of a control plane (issue 11).
Callers name the address themselves; this says only what went wrong.
"""

from __future__ import annotations

import os

import aiohttp


def connect_failure(e: aiohttp.ClientConnectorError) -> str:
    """'cannot connect (Connection refused)', or why a certificate was not accepted."""
    if isinstance(e, aiohttp.ClientConnectorCertificateError):
        return f"its certificate was not accepted ({e.certificate_error})"
    code = e.os_error.errno
    return f"cannot connect ({os.strerror(code) if code else e.os_error.strerror or type(e.os_error).__name__})"
