"""What the LDAP tests share: the slapd they run against, settings that point at it, and its secrets."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from llmgw.auth import Secrets
from llmgw.config.auth import LDAPSettings
from llmgw.config.keyfiles import OwnSecrets
from llmgw.config.types import Duration
from tests.support.slapd import PEOPLE, READER_DN, READER_PW, Slapd, SlapdMissing


def start_slapd(root: Path) -> Slapd:
    try:
        return Slapd(root).start()
    except SlapdMissing as e:
        # Fail, never skip: CI installs slapd, and a skipped LDAP suite passes with sign-in untested.
        pytest.fail(str(e), pytrace=False)


def bind_file(root: Path, password: str = READER_PW) -> str:
    path = root / "ldap-bind"
    path.write_text(password + "\n")
    os.chmod(path, 0o600)
    return str(path)


def settings_for(slapd: Slapd, bind_password_file: str, **changes) -> LDAPSettings:
    base = LDAPSettings(urls=[slapd.ldaps_url], ca=slapd.ca_pem, bind_dn=READER_DN,
                        bind_password_file=bind_password_file, base_dn=PEOPLE, domain="CORP",
                        roles={"admin": ["llmgw-admins"]}, timeout=Duration("5s"))
    return replace(base, **changes)


def file_secrets(root: Path) -> Secrets:
    """Secrets read from files only: what these tests give is a file's path, never store:auth/NAME."""
    return Secrets(None, str(root), OwnSecrets(files=()))  # type: ignore[arg-type]
