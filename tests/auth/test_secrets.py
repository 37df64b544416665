"""Sign-in's secrets: sealed in the store under the master key, or read from a file only llmgw's user reads."""

from __future__ import annotations

import os

import pytest

from llmgw.auth import SecretError, Secrets
from llmgw.config.keyfiles import OwnSecrets
from llmgw.trust import ensure_master_key
from llmgw.trust.masterkey import FILE_NAME


@pytest.fixture
def secrets_(store, tmp_path) -> Secrets:
    ensure_master_key(str(tmp_path / FILE_NAME))
    return Secrets(store, str(tmp_path), OwnSecrets(files=(str(tmp_path / FILE_NAME),)))


async def test_a_secret_kept_in_the_store_is_sealed_and_read_back_by_its_reference(secrets_, store):
    ref = await secrets_.put("ldap-bind", "s3cret-Bind!")

    assert ref == "store:auth/ldap-bind"
    assert b"s3cret-Bind!" not in await store.sealed_secret("auth/ldap-bind")
    assert await secrets_.read(ref, "auth.ldap.bind_password_file") == "s3cret-Bind!"


async def test_a_missing_stored_secret_says_how_to_keep_it(secrets_):
    with pytest.raises(SecretError, match="llmgw ctl auth secret set oidc-client"):
        await secrets_.read("store:auth/oidc-client", "auth.oidc.client_secret_file")


async def test_a_secret_file_others_can_read_is_refused_without_saying_what_is_in_it(secrets_, tmp_path):
    path = tmp_path / "client-secret"
    path.write_text("hunter2-client\n")
    os.chmod(path, 0o644)
    with pytest.raises(SecretError) as e:
        await secrets_.read(str(path), "auth.oidc.client_secret_file")
    assert "chmod 600" in str(e.value) and "hunter2" not in str(e.value)
    os.chmod(path, 0o600)
    assert await secrets_.read(str(path), "auth.oidc.client_secret_file") == "hunter2-client"


async def test_the_master_key_file_itself_is_never_a_secret_file(secrets_, tmp_path):
    with pytest.raises(SecretError, match="own secrets"):
        await secrets_.read(str(tmp_path / FILE_NAME), "auth.ldap.bind_password_file")
