"""Sign-in from the company's directory: OpenID Connect, LDAP and Active Directory with sync, SCIM (issue 14).

The package's face: other packages import these names from `llmgw.auth`.
It stands beside guard (docs/internals.md): over account, whose people,
sessions and memberships it moves, and trust, whose master key seals its
secrets.
"""

from llmgw.auth.directory import SUSPENDED, DirectoryAccounts, GroupMap, Vouched
from llmgw.auth.secrets import SecretError, Secrets
from llmgw.auth.trial import Step, Trial

__all__ = ["SUSPENDED", "DirectoryAccounts", "GroupMap", "SecretError", "Secrets", "Step", "Trial", "Vouched"]
