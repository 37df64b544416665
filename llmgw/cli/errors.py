"""Which exceptions are already sentences for people, and how to say them."""

from __future__ import annotations


def explain(error: BaseException) -> str | None:
    """The sentence for an error the program expects, None for a bug."""
    from llmgw.account.service import AccountError
    from llmgw.account.tree import TreeError
    from llmgw.cli.adminclient import AdminError
    from llmgw.config.loader import ConfigError
    from llmgw.control.listeners import ListenError
    from llmgw.control.token import TokenError
    from llmgw.trust import TrustError
    from llmgw.onboard.keepalived import FloatingAddressError
    from llmgw.store import StoreError

    expected = (AdminError, ConfigError, StoreError, ListenError, TokenError, AccountError, TreeError, TrustError,
                FloatingAddressError)
    if isinstance(error, expected):
        return str(error)
    return None
