"""Certificates and kubeconfigs for the sandbox control plane (made with ``cryptography``).

One throwaway CA signs everything: the apiserver's serving certificate, client certificates
(``admin`` in ``system:masters``, plus any extra users such as a controller identity that RBAC
must authorize), and the service-account signing key pair is a separate RSA key. Files are written
as PEM into one directory, private keys with mode 0600.

The admin kubeconfig authenticates with a bearer token (``--token-auth-file``), as an in-cluster
controller does with its ServiceAccount token: the API server verifies an x509 client certificate
chain on every request, about 8 % of its CPU in a 1,000-node rollout. The admin client
certificate is still issued for tools that want one.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for any sandbox's life, short enough that a leaked file is soon worthless.
VALIDITY = datetime.timedelta(days=30)
# Clock skew between creation and the apiserver's first check.
BACKDATE = datetime.timedelta(minutes=5)
SERVICE_IP = "10.0.0.1"  # first address of --service-cluster-ip-range 10.0.0.0/24
SERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVER_IPS = ("127.0.0.1", SERVICE_IP)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True, slots=True)
class ClientCert:
    user: str
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class BearerToken:
    user: str
    token: str


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of everything ``make_pki`` wrote."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    admin: ClientCert
    sa_key: Path  # RSA private key: --service-account-signing-key-file, KCM --service-account-...
    sa_pub: Path  # its public key: --service-account-key-file
    token_file: Path  # --token-auth-file: the admin's bearer token (system:masters)

    @property
    def admin_token(self) -> BearerToken:
        token = self.token_file.read_text().split(",", 1)[0]
        return BearerToken("admin", token)

    def client(self, user: str, groups: Sequence[str] = ()) -> ClientCert:
        """Issue (or reuse) a client certificate for ``user`` in ``groups``."""
        return issue_client_cert(self, user, groups)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _sign(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    sans: Sequence[x509.GeneralName] = (),
    usages: Sequence[x509.ObjectIdentifier] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=not ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)
    return path


def _load_ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key} is not an EC key")
    return cert, key


def make_pki(directory: Path, *, extra_ips: Sequence[str] = ()) -> Pki:
    """Create the CA, serving cert, admin client cert and service-account keys in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("nodewright-sandbox-ca")
    ca = _sign(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)

    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in SERVER_DNS_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in (*SERVER_IPS, *extra_ips)]
    server = _sign(
        _name("kube-apiserver"),
        server_key.public_key(),
        ca_name,
        ca_key,
        sans=sans,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pki = Pki(
        directory=directory,
        ca_cert=_write(directory / "ca.crt", _cert_pem(ca)),
        ca_key=_write(directory / "ca.key", _key_pem(ca_key), private=True),
        server_cert=_write(directory / "apiserver.crt", _cert_pem(server)),
        server_key=_write(directory / "apiserver.key", _key_pem(server_key), private=True),
        admin=ClientCert("admin", directory / "admin.crt", directory / "admin.key"),
        sa_key=_write(directory / "sa.key", _key_pem(sa_key), private=True),
        sa_pub=_write(directory / "sa.pub", sa_pub),
        token_file=_write(
            directory / "tokens.csv",
            f'{secrets.token_urlsafe(32)},admin,admin,"system:masters"\n'.encode(),
            private=True,
        ),
    )
    issue_client_cert(pki, "admin", ["system:masters"])
    return pki


def load_pki(directory: Path) -> Pki:
    """The ``Pki`` of a directory ``make_pki`` wrote earlier."""
    return Pki(
        directory=directory,
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_cert=directory / "apiserver.crt",
        server_key=directory / "apiserver.key",
        admin=ClientCert("admin", directory / "admin.crt", directory / "admin.key"),
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
        token_file=directory / "tokens.csv",
    )


def _file_stem(user: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in user)


def issue_client_cert(pki: Pki, user: str, groups: Sequence[str] = ()) -> ClientCert:
    """A client certificate for ``user`` (CN) in ``groups`` (O), signed by the sandbox CA."""
    ca, ca_key = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _sign(
        _name(user, groups),
        key.public_key(),
        ca.subject,
        ca_key,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    stem = "admin" if user == "admin" else f"user-{_file_stem(user)}"
    return ClientCert(
        user=user,
        cert=_write(pki.directory / f"{stem}.crt", _cert_pem(cert)),
        key=_write(pki.directory / f"{stem}.key", _key_pem(key), private=True),
    )


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def kubeconfig_text(
    server: str, ca_cert: Path, client: ClientCert | BearerToken, *, name: str = "sandbox"
) -> str:
    """A self-contained kubeconfig (certificates inlined) for ``client`` against ``server``."""
    if isinstance(client, BearerToken):
        credentials = {"token": client.token}
    else:
        credentials = {
            "client-certificate-data": _b64(client.cert),
            "client-key-data": _b64(client.key),
        }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [
            {
                "name": client.user,
                "user": credentials,
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": client.user}}],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(
    path: Path,
    server: str,
    ca_cert: Path,
    client: ClientCert | BearerToken,
    *,
    name: str = "sandbox",
) -> Path:
    path.write_text(kubeconfig_text(server, ca_cert, client, name=name))
    os.chmod(path, 0o600)
    return path
