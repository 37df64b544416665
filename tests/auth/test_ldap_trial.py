"""Trying the LDAP settings and signing in against a real slapd: each failure named in one sentence."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmgw.account import AccountError
from llmgw.auth import ldap
from llmgw.config.loader import Invalid
from tests.auth.ldapkit import bind_file, file_secrets, settings_for, start_slapd
from tests.support.slapd import make_ca, pem

pytestmark = pytest.mark.slow  # a real slapd


@pytest.fixture(scope="module")
def slapd(tmp_path_factory):
    server = start_slapd(tmp_path_factory.mktemp("slapd"))
    yield server
    server.destroy()


@pytest.fixture
def secrets_(tmp_path):
    return file_secrets(tmp_path)


@pytest.fixture
def settings(slapd, tmp_path):
    return settings_for(slapd, bind_file(tmp_path))


def failed(trial) -> tuple[str, str]:
    step = next(s for s in trial.steps if not s.ok)
    return step.name, step.detail


@pytest.mark.parametrize("typed", ["ada", "CORP\\ada", "corp\\ada", "ada@corp.example"])
async def test_a_person_signs_in_by_each_form_of_their_name(slapd, settings, secrets_, typed):
    vouched = await ldap.sign_in(settings, secrets_, typed, "ada-password-1")

    assert (vouched.source, vouched.email, vouched.name) == ("ldap", "ada@corp.example", "Ada Lovelace")
    assert len(vouched.subject) == 36  # entryUUID, the id that outlives a rename


async def test_nested_groups_are_named_by_cn_and_by_dn(slapd, settings, secrets_):
    vouched = await ldap.sign_in(settings, secrets_, "ada", "ada-password-1")

    assert {"platform", "llmgw-admins", "llmgw-users", slapd.group_dn("llmgw-admins")} <= vouched.groups


@pytest.mark.parametrize("typed,password", [("ada", "wrong-password"), ("nobody", "ada-password-1"),
                                            ("OTHER\\ada", "ada-password-1"), ("ada", ""), ("*", "x"),
                                            ("ada)(uid=*", "ada-password-1")])
async def test_a_wrong_password_and_an_unknown_name_get_the_same_sentence(slapd, settings, secrets_, typed,
                                                                          password):
    with pytest.raises(AccountError) as e:
        await ldap.sign_in(settings, secrets_, typed, password)

    assert (e.value.status, str(e.value)) == (401, "that user name and password do not match a directory "
                                                   "account here")


async def test_no_server_answering_is_503_with_a_sentence(settings, secrets_):
    from tests.support.pgcluster import free_port

    with pytest.raises(AccountError) as e:
        await ldap.sign_in(replace(settings, urls=[f"ldaps://localhost:{free_port()}"]), secrets_, "ada", "x-1")

    assert e.value.status == 503 and "could not be reached" in str(e.value)


async def test_starttls_on_the_plain_port_signs_in(slapd, settings, secrets_):
    vouched = await ldap.sign_in(replace(settings, urls=[slapd.ldap_url], start_tls=True), secrets_, "bob",
                                 "bob-password-1")

    assert vouched.email == "bob@corp.example"


async def test_plaintext_ldap_is_refused_by_the_settings_and_by_the_connection(slapd, settings, secrets_):
    plain = replace(settings, urls=[slapd.ldap_url], start_tls=False)
    with pytest.raises(Invalid, match="plaintext LDAP"):
        plain.validate()

    trial = await ldap.trial(plain, secrets_)
    assert failed(trial) == (f"reach {slapd.ldap_url}",
                             f"{slapd.ldap_url} is plaintext LDAP, which would send passwords in the clear; "
                             "use ldaps://, or set start_tls: true")
    with pytest.raises(AccountError) as e:
        await ldap.sign_in(plain, secrets_, "ada", "ada-password-1")
    assert e.value.status == 503


async def test_the_trial_of_good_settings_passes_each_step_and_lists_the_groups(slapd, settings, secrets_):
    trial = await ldap.trial(settings, secrets_, login="CORP\\ada")

    assert trial.ok, trial.view()
    assert [s.name for s in trial.steps] == [f"reach {slapd.ldaps_url}", "bind as the service account",
                                             "people under base_dn", "find CORP\\ada", "groups of CORP\\ada"]
    assert trial.steps[2].detail.startswith("2 people under")
    assert trial.steps[-1].detail == "llmgw-admins, llmgw-users, platform"


async def test_an_unknown_ca_is_named(slapd, settings, secrets_):
    other, _ = make_ca("someone else's CA")

    trial = await ldap.trial(replace(settings, ca=pem(other)), secrets_)

    assert failed(trial)[1] == ("localhost's certificate is not signed by an authority this gateway trusts; "
                                "put the directory's CA in auth.ldap.ca (PEM) or auth.ldap.ca_file")


async def test_a_certificate_without_the_host_in_its_sans_is_named(slapd, settings, secrets_):
    url = slapd.ldaps_url.replace("localhost", "127.0.0.1")

    trial = await ldap.trial(replace(settings, urls=[url]), secrets_)

    assert failed(trial)[1].startswith("127.0.0.1's certificate does not name 127.0.0.1 among its subject "
                                       "alternative names")


async def test_the_second_server_is_tried_when_the_first_refuses(slapd, settings, secrets_):
    from tests.support.pgcluster import free_port

    dead = f"ldaps://localhost:{free_port()}"
    s = replace(settings, urls=[dead, slapd.ldaps_url])

    trial = await ldap.trial(s, secrets_)
    assert failed(trial) == (f"reach {dead}", f"localhost:{dead.rsplit(':', 1)[1]} refused the connection; "
                                              "is the directory server running and listening there?")
    assert trial.steps[-1].ok
    assert (await ldap.sign_in(s, secrets_, "ada", "ada-password-1")).email == "ada@corp.example"


async def test_a_wrong_bind_dn_is_named(slapd, settings, secrets_):
    trial = await ldap.trial(replace(settings, bind_dn="cn=nobody,ou=services,dc=corp,dc=example"), secrets_)

    assert failed(trial) == ("bind as the service account",
                             "the directory refused the service account cn=nobody,ou=services,dc=corp,dc=example: "
                             "its DN or password is wrong; check auth.ldap.bind_dn and what "
                             "auth.ldap.bind_password_file holds")


async def test_a_wrong_bind_password_is_named_without_showing_it(slapd, settings, secrets_, tmp_path):
    trial = await ldap.trial(replace(settings, bind_password_file=bind_file(tmp_path, "not-the-password")),
                             secrets_)

    assert failed(trial)[0] == "bind as the service account"
    assert "not-the-password" not in str(trial.view())


async def test_a_filter_that_finds_nobody_is_named(slapd, settings, secrets_):
    trial = await ldap.trial(replace(settings, user_filter="(memberOf=cn=nobody-here,ou=groups,dc=corp,dc=example)"),
                             secrets_)

    assert failed(trial) == ("people under base_dn",
                             "nobody under ou=people,dc=corp,dc=example matches auth.ldap.user_filter "
                             "(memberOf=cn=nobody-here,ou=groups,dc=corp,dc=example); loosen the filter, or check "
                             "the group it names")


async def test_a_base_dn_that_does_not_exist_is_named(slapd, settings, secrets_):
    trial = await ldap.trial(replace(settings, base_dn="ou=staff,dc=corp,dc=example"), secrets_)

    assert failed(trial) == ("people under base_dn", "ou=staff,dc=corp,dc=example does not exist in the "
                                                     "directory; check its spelling (OU=…,DC=…)")


async def test_a_login_the_filter_leaves_out_is_named_in_the_trial(slapd, settings, secrets_):
    trial = await ldap.trial(replace(settings, user_filter=f"(memberOf={slapd.group_dn('platform')})"), secrets_,
                             login="bob")

    assert failed(trial) == ("find bob", "bob is not a person under ou=people,dc=corp,dc=example that "
                                         "auth.ldap.user_filter admits")


async def test_a_ca_file_missing_from_this_machine_is_named(slapd, settings, secrets_, tmp_path):
    trial = await ldap.trial(replace(settings, ca="", ca_file=str(tmp_path / "corp-ca.pem")), secrets_)

    assert failed(trial)[1].startswith(f"auth.ldap.ca_file {tmp_path / 'corp-ca.pem'} is not on this machine")


async def test_a_ca_file_on_this_machine_is_used(slapd, settings, secrets_, tmp_path):
    (tmp_path / "corp-ca.pem").write_text(slapd.ca_pem)

    trial = await ldap.trial(replace(settings, ca="", ca_file=str(tmp_path / "corp-ca.pem")), secrets_)

    assert trial.ok, trial.view()
