"""The error of a directory that could not be reached or would not answer.

Its own module, without ldap3: the directory sync catches it, and every
control plane builds the sync at start, while ldap3's import (75 ms) is paid
only by a plane that talks to a directory.
"""

from __future__ import annotations

from collections.abc import Mapping

from llmgw.errors import ExpectedError


class DirectoryError(ExpectedError):
    """The directory could not be reached or would not answer; `kind` says which step failed."""

    def __init__(self, message: str, /, *, kind: str, params: Mapping[str, object] | None = None):
        super().__init__(message, params=params)
        self.kind = kind  # reach | bind | search
