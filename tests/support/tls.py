"""Certificates for the TLS tests, made with the openssl command line: a CA, a server certificate
for 127.0.0.1/localhost, and client certificates, all signed by the CA (PEM files)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path

    def client(self, common_name: str) -> tuple[Path, Path]:
        """(certificate, key) of a client certificate with subject CN=<name>,O=groupcoord."""
        cert, key = self.dir / f"{common_name}.pem", self.dir / f"{common_name}.key"
        if not cert.exists():
            _signed(self.dir, common_name, f"/O=groupcoord/CN={common_name}", None)
        return cert, key

    def server(self, name: str) -> tuple[Path, Path]:
        """(certificate, key) of another server certificate for 127.0.0.1/localhost (its own
        key and serial number), as a certificate rotation would bring."""
        cert, key = self.dir / f"{name}.pem", self.dir / f"{name}.key"
        if not cert.exists():
            _signed(self.dir, name, "/CN=localhost", "IP:127.0.0.1,DNS:localhost")
        return cert, key


def serial(cert: Path) -> int:
    """A PEM certificate's serial number."""
    out = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in", str(cert)], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().partition("=")[2], 16)


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _signed(d: Path, name: str, subject: str, san: str | None) -> None:
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", subject, cwd=d)  # fmt: skip
    ext = []
    if san:
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        ext = ["-extfile", f"{name}.ext"]
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", "2", "-sha256", "-out", f"{name}.pem", *ext,
         cwd=d)  # fmt: skip


def make_certs(d: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    d.mkdir(parents=True, exist_ok=True)
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
         "-days", "2", "-subj", "/CN=groupcoord test CA", cwd=d)  # fmt: skip
    _signed(d, "server", "/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    return Certs(d, d / "ca.pem", d / "server.pem", d / "server.key")
