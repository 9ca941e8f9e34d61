"""The sandbox PKI: who each certificate says it is, what it may be used for, and kubeconfigs."""

from __future__ import annotations

import base64
import ipaddress
import stat
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodewright_bridge.sandbox import pki


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_serving_certificate_names_loopback_and_the_in_cluster_service(tmp_path: Path) -> None:
    made = pki.make_pki(tmp_path)
    server = _cert(made.server_cert)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "kubernetes.default.svc"} <= set(sans.get_values_for_type(x509.DNSName))
    ips = set(sans.get_values_for_type(x509.IPAddress))
    assert {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.0.0.1")} <= ips
    usages = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages


def test_every_certificate_is_signed_by_the_sandbox_ca(tmp_path: Path) -> None:
    made = pki.make_pki(tmp_path)
    ca = _cert(made.ca_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for path in (made.server_cert, made.admin.cert):
        _cert(path).verify_directly_issued_by(ca)


def test_the_admin_is_a_member_of_system_masters(tmp_path: Path) -> None:
    admin = _cert(pki.make_pki(tmp_path).admin.cert)
    assert admin.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    orgs = [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    usages = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages


def test_an_extra_client_has_its_own_groups_and_no_masters(tmp_path: Path) -> None:
    made = pki.make_pki(tmp_path)
    client = made.client("system:serviceaccount:nw:controller", ["team-a", "team-b"])
    cert = _cert(client.cert)
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["team-a", "team-b"]
    assert client.cert != made.admin.cert
    cert.verify_directly_issued_by(_cert(made.ca_cert))


def test_private_keys_are_readable_only_by_the_owner(tmp_path: Path) -> None:
    made = pki.make_pki(tmp_path)
    for key in (made.ca_key, made.server_key, made.admin.key, made.sa_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_the_service_account_public_key_matches_its_private_key(tmp_path: Path) -> None:
    made = pki.make_pki(tmp_path)
    private = serialization.load_pem_private_key(made.sa_key.read_bytes(), password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    public = serialization.load_pem_public_key(made.sa_pub.read_bytes())
    assert public.public_numbers() == private.public_key().public_numbers()  # type: ignore[union-attr]


def test_a_kubeconfig_inlines_the_ca_and_the_client_credentials(tmp_path: Path) -> None:
    made = pki.make_pki(tmp_path)
    path = pki.write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", made.ca_cert, made.admin)
    config = yaml.safe_load(path.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == made.ca_cert.read_bytes()
    user = config["users"][0]["user"]
    assert base64.b64decode(user["client-key-data"]) == made.admin.key.read_bytes()
    assert config["current-context"] == config["contexts"][0]["name"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
