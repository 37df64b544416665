"""Sign-in from the company's directory: OpenID Connect, LDAP and Active Directory with sync, SCIM (issue 14).

The package's face: other packages import these names from `llmgw.auth`.
It stands beside guard (docs/internals.md): over account, whose people,
sessions and memberships it moves, and trust, whose master key seals its
secrets.
"""

from typing import TYPE_CHECKING

from llmgw.auth.directory import SUSPENDED, DirectoryAccounts, GroupMap, Vouched
from llmgw.auth.secrets import SecretError, Secrets
from llmgw.auth.trial import Step, Trial
from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.auth.ldapsync import SYNC_TARGET, LdapSync
    from llmgw.auth.oidc import OIDCClient, OIDCError, client_secret, vouched
    from llmgw.auth.oidcflow import (
        CALLBACK,
        COOKIE,
        COOKIE_PATH,
        FLOW_TTL,
        NO_ADDRESS,
        Flow,
        configured_redirect,
        spent_key,
    )
    from llmgw.auth.scim import mount
    from llmgw.auth.scim.tokens import make_token, token_made

__all__ = ["SUSPENDED", "DirectoryAccounts", "GroupMap", "SecretError", "Secrets", "Step", "Trial", "Vouched",
           "LdapSync", "SYNC_TARGET", "OIDCClient", "OIDCError", "client_secret", "vouched", "CALLBACK", "COOKIE",
           "COOKIE_PATH", "FLOW_TTL", "Flow", "NO_ADDRESS", "configured_redirect", "spent_key", "mount", "make_token",
           "token_made"]

# Names that would load more than the rest of the face, imported from their module when first asked for
# (llmgw/lazyface.py): the OpenID Connect client, the LDAP sync and SCIM are each wanted by one reader.
__getattr__ = lazy_face(__name__, {
    "ldapsync": ("LdapSync", "SYNC_TARGET"),
    "oidc": ("OIDCClient", "OIDCError", "client_secret", "vouched"),
    "oidcflow": ("CALLBACK", "COOKIE", "COOKIE_PATH", "FLOW_TTL", "Flow", "NO_ADDRESS", "configured_redirect",
        "spent_key"),
    "scim": ("mount",),
    "scim.tokens": ("make_token", "token_made"),
})
