"""A real OpenLDAP server (Debian's slapd) on loopback, for the LDAP sign-in and sync tests.

Each Slapd gets a temp dir: a CA of its own and a server certificate made
with cryptography (its SAN names `localhost` only, so the same server
reached as 127.0.0.1 shows a certificate without the host in its SANs),
cn=config made by slapadd with the mdb backend and the memberof, refint and
ppolicy overlays, and two listeners: ldaps:// and ldap:// (for StartTLS).
The directory holds an OU of people, nested groupOfNames groups and a
read-only service account; the test changes it through `admin()`, the root
DN over the plain listener (the test's own loopback, nothing sent is real).

ppolicy is loaded for one reason: `pwdAccountLockedTime` is how an OpenLDAP
administrator disables someone, and slapd then refuses their bind itself.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.pgcluster import free_port

SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"
MODULES = "/usr/lib/ldap"
SCHEMAS = "/etc/ldap/schema"

SUFFIX = "dc=corp,dc=example"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PW = "root-of-the-test-directory"
READER_DN = f"cn=llmgw-reader,ou=services,{SUFFIX}"
READER_PW = "reader-password-1"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
LOCKED = "000001010000Z"  # ppolicy: locked until an administrator unlocks


class SlapdMissing(RuntimeError):
    pass


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def make_server_cert(ca: x509.Certificate, ca_key, names: list[str]):
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(names[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _config(d: Path) -> str:
    return f"""\
dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: {d}/slapd.pid
olcTLSCACertificateFile: {d}/ca.pem
olcTLSCertificateFile: {d}/server.pem
olcTLSCertificateKeyFile: {d}/server.key

dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: {MODULES}
olcModuleLoad: back_mdb
olcModuleLoad: memberof
olcModuleLoad: refint
olcModuleLoad: ppolicy

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

include: file://{SCHEMAS}/core.ldif

include: file://{SCHEMAS}/cosine.ldif

include: file://{SCHEMAS}/inetorgperson.ldif

dn: olcDatabase={{-1}}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {{-1}}frontend

dn: olcDatabase={{0}}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {{0}}config
olcAccess: {{0}}to * by * none

dn: olcDatabase={{1}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{1}}mdb
olcSuffix: {SUFFIX}
olcRootDN: {ROOT_DN}
olcRootPW: {ROOT_PW}
olcDbDirectory: {d}/data
olcDbMaxSize: 67108864
olcDbIndex: objectClass eq
olcDbIndex: entryUUID eq
olcDbIndex: uid,mail eq
olcAccess: {{0}}to attrs=userPassword by anonymous auth by * none
olcAccess: {{1}}to * by dn.exact="{READER_DN}" read by * none

dn: olcOverlay={{0}}memberof,olcDatabase={{1}}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcMemberOf
olcOverlay: {{0}}memberof
olcMemberOfRefInt: TRUE
olcMemberOfGroupOC: groupOfNames
olcMemberOfMemberAD: member
olcMemberOfMemberOfAD: memberOf

dn: olcOverlay={{1}}refint,olcDatabase={{1}}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcRefintConfig
olcOverlay: {{1}}refint
olcRefintAttribute: member

dn: olcOverlay={{2}}ppolicy,olcDatabase={{1}}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcPPolicyConfig
olcOverlay: {{2}}ppolicy
olcPPolicyDefault: cn=default,ou=policies,{SUFFIX}
"""


class Slapd:
    """One slapd in `root`, with ldaps_url, ldap_url (StartTLS), ca_pem and the directory's people and groups."""

    def __init__(self, root: Path):
        for tool in (SLAPD, SLAPADD):
            if not os.access(tool, os.X_OK):
                raise SlapdMissing(f"{tool} is not installed, and the LDAP tests need a real directory server: "
                                   "apt-get install slapd ldap-utils")
        self.dir = root
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "data").mkdir()
        (self.dir / "slapd.d").mkdir()
        self.ca, ca_key = make_ca("llmgw test directory CA")
        self.ca_pem = pem(self.ca)
        cert, key = make_server_cert(self.ca, ca_key, ["localhost"])
        (self.dir / "ca.pem").write_text(self.ca_pem)
        (self.dir / "server.pem").write_text(pem(cert))
        (self.dir / "server.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        os.chmod(self.dir / "server.key", 0o600)
        (self.dir / "config.ldif").write_text(_config(self.dir))
        done = subprocess.run([SLAPADD, "-n0", "-F", str(self.dir / "slapd.d"), "-l", str(self.dir / "config.ldif")],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"slapadd of cn=config failed: {done.stderr}")
        self.ldaps_port, self.ldap_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def ldaps_url(self) -> str:
        return f"ldaps://localhost:{self.ldaps_port}"

    @property
    def ldap_url(self) -> str:
        return f"ldap://localhost:{self.ldap_port}"

    def start(self, timeout: float = 30) -> Slapd:
        self.log = open(self.dir / "slapd.log", "ab")
        listen = f"ldaps://127.0.0.1:{self.ldaps_port}/ ldap://127.0.0.1:{self.ldap_port}/"
        # -d keeps it in the foreground, so its PID is ours to stop.
        self.proc = subprocess.Popen([SLAPD, "-d", "0", "-F", str(self.dir / "slapd.d"), "-h", listen],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"slapd exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.ldap_port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"slapd did not listen in {timeout} s:\n{self.output()}") from None
                time.sleep(0.05)
        self._seed()
        return self

    def output(self) -> str:
        return (self.dir / "slapd.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # the directory's contents

    def admin(self):
        """A connection as the root DN over the plain listener: the test's hand on the directory."""
        import ldap3

        server = ldap3.Server(f"ldap://127.0.0.1:{self.ldap_port}", get_info=ldap3.NONE, connect_timeout=10)
        return ldap3.Connection(server, ROOT_DN, ROOT_PW, auto_bind=True, receive_timeout=10, raise_exceptions=True)

    def _seed(self) -> None:
        with self.admin() as c:
            c.add(SUFFIX, ["dcObject", "organization"], {"dc": "corp", "o": "Corp"})
            for ou in ("people", "groups", "services", "policies"):
                c.add(f"ou={ou},{SUFFIX}", ["organizationalUnit"], {"ou": ou})
            # Without a policy that says pwdLockout, slapd keeps a locked account's bind working.
            # pwdMaxFailure 0 is ppolicy's "never lock after failed binds": the tests' wrong passwords
            # must not lock ada; a person is disabled only where a test sets pwdAccountLockedTime itself.
            c.add(f"cn=default,ou=policies,{SUFFIX}", ["organizationalRole", "pwdPolicy"],
                  {"cn": "default", "pwdAttribute": "userPassword", "pwdLockout": "TRUE", "pwdMaxFailure": "0"})
            c.add(READER_DN, ["organizationalRole", "simpleSecurityObject"], {"userPassword": READER_PW})
        self.add_person("ada", "Ada Lovelace", "ada-password-1")
        self.add_person("bob", "Bob Babbage", "bob-password-1")
        # Nested: platform is a member of llmgw-admins; ada is in platform only.
        self.add_group("platform", [self.person_dn("ada")])
        self.add_group("llmgw-admins", [self.group_dn("platform")])
        self.add_group("llmgw-users", [self.person_dn("ada"), self.person_dn("bob")])

    def person_dn(self, uid: str) -> str:
        return f"uid={uid},{PEOPLE}"

    def group_dn(self, cn: str) -> str:
        return f"cn={cn},{GROUPS}"

    def add_person(self, uid: str, name: str, password: str, mail: str | None = None) -> str:
        dn = self.person_dn(uid)
        with self.admin() as c:
            c.add(dn, ["inetOrgPerson"], {"uid": uid, "cn": name, "sn": name.split()[-1],
                                           "mail": mail or f"{uid}@corp.example", "userPassword": password})
        return dn

    def add_group(self, cn: str, members: list[str]) -> str:
        dn = self.group_dn(cn)
        with self.admin() as c:
            c.add(dn, ["groupOfNames"], {"cn": cn, "member": members})
        return dn

    def modify(self, dn: str, **values: list[str]) -> None:
        import ldap3

        with self.admin() as c:
            c.modify(dn, {k: [(ldap3.MODIFY_REPLACE, v)] for k, v in values.items()})

    def join(self, group: str, dn: str) -> None:
        import ldap3

        with self.admin() as c:
            c.modify(self.group_dn(group), {"member": [(ldap3.MODIFY_ADD, [dn])]})

    def lock(self, uid: str) -> None:
        """Disabled the way an OpenLDAP administrator does it: ppolicy's permanent lock."""
        self.modify(self.person_dn(uid), pwdAccountLockedTime=[LOCKED])

    def unlock(self, uid: str) -> None:
        self.modify(self.person_dn(uid), pwdAccountLockedTime=[])

    def delete(self, dn: str) -> None:
        with self.admin() as c:
            c.delete(dn)
