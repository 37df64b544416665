"""People, sessions, API keys, limits and the tenancy tree (org/team/project/key).

This is the package's face: other packages import these names from
`llmgw.account`, not from its modules, so a module can be split or renamed
inside without touching them (docs/internals.md).
"""

from llmgw.account.chattokens import ChatTokens, chat_key_id
from llmgw.account.errors import AccountError, Actor
from llmgw.account.keycache import KeyCache, Principal, principal_of
from llmgw.account.keys import KEY_PREFIX, digest, key_flaw, looks_like_key
from llmgw.account.limits import (
    CHAIN,
    Budget,
    Effective,
    LimitError,
    check_narrows,
    effective,
    format_money,
    parse_money,
)
from llmgw.account.passwords import check_password, check_password_strength, hash_password, new_password
from llmgw.account.people import ROLES, People, person_view
from llmgw.account.persontokens import TOKEN_PREFIX, PersonTokens, token_view
from llmgw.account.places import Places
from llmgw.account.scope import CLUSTER, Scope, Walls, scope_of
from llmgw.account.service import Accounts, key_view, places_of
from llmgw.account.sessions import CHAT_PREFIX, Current, Sessions, SignedIn
from llmgw.account.throttle import UnknownKeyThrottle
from llmgw.account.tree import TreeError, check_name, parse_project_path

__all__ = [
    "CHAIN",
    "CHAT_PREFIX",
    "CLUSTER",
    "PersonTokens",
    "Scope",
    "TOKEN_PREFIX",
    "Walls",
    "scope_of",
    "token_view",
    "KEY_PREFIX",
    "AccountError",
    "ChatTokens",
    "Accounts",
    "Actor",
    "Current",
    "Effective",
    "KeyCache",
    "principal_of",
    "LimitError",
    "People",
    "Places",
    "Principal",
    "ROLES",
    "Sessions",
    "SignedIn",
    "TreeError",
    "UnknownKeyThrottle",
    "chat_key_id",
    "check_name",
    "check_narrows",
    "check_password",
    "check_password_strength",
    "digest",
    "effective",
    "format_money",
    "hash_password",
    "key_flaw",
    "looks_like_key",
    "new_password",
    "parse_money",
    "parse_project_path",
    "person_view",
    "Budget",
    "key_view",
    "places_of",
]
