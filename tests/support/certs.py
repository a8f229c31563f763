"""A self-signed certificate for `localhost` and 127.0.0.1, made at test time (TLS acceptors and the
connectors that trust them)."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.peers.ports import LOOPBACK

HOSTNAME = "localhost"


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


def _with_cryptography(directory: Path) -> CertFiles | None:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        return None
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTNAME)])
    now = datetime.datetime.now(datetime.UTC)
    alt_names = [x509.DNSName(HOSTNAME), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    files = CertFiles(directory / "broker.pem", directory / "broker.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


def _with_openssl(directory: Path) -> CertFiles | None:
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    files = CertFiles(directory / "broker.pem", directory / "broker.key")
    argv = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    argv += ["-nodes", "-keyout", str(files.key), "-out", str(files.cert), "-days", "1"]
    argv += ["-subj", f"/CN={HOSTNAME}", "-addext", f"subjectAltName=DNS:{HOSTNAME},IP:{LOOPBACK}"]
    subprocess.run(
        argv,
        check=True,
        capture_output=True,
        timeout=30,
    )
    return files


def make_certs(directory: Path) -> CertFiles | None:
    """With the cryptography package, else openssl; None when neither is there."""
    return _with_cryptography(directory) or _with_openssl(directory)
