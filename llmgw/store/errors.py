"""Errors the store raises, each a sentence a person can act on."""

from llmgw.errors import ExpectedError


class StoreError(ExpectedError):
    """Something about the store that stops the work, said as a sentence."""


class StoreUnavailable(StoreError):
    """The store did not answer: down, unreachable or refusing connections."""


class SchemaTooNew(StoreError):
    """A newer llmgw has migrated this store; this program must not touch it."""


class Conflict(StoreError):
    """A write lost a race or broke a uniqueness rule (a taken name, a stale version)."""
