"""Throw-away TLS material for the webhook tests: a CA and a serving certificate, made with the openssl CLI."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_certs(
    directory: Path,
    *,
    alt_names: str = "IP:127.0.0.1,DNS:localhost",
    prefix: str = "",
    usage: str = "serverAuth",
    cn: str = "dra-gpu-webhook",
) -> Certs:
    """A fresh CA (``<prefix>ca.crt``) and a certificate it signed for ``alt_names`` (``<prefix>tls.crt``/``.key``).

    ``usage``: the extended key usage (``clientAuth`` for a client certificate); ``cn``: its common name.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca, ca_key = directory / f"{prefix}ca.crt", directory / f"{prefix}ca.key"
    cert, key, csr, ext = (directory / f"{prefix}{n}" for n in ("tls.crt", "tls.key", "tls.csr", "san.ext"))
    _openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=dra-gpu-webhook-test-ca", "-keyout", ca_key, "-out", ca)
    _openssl("req", *ec, "-subj", f"/CN={cn}", "-keyout", key, "-out", csr)
    ext.write_text(f"subjectAltName={alt_names}\nextendedKeyUsage={usage}\n")
    _openssl(
        "x509", "-req", "-days", "2", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-extfile", ext, "-out", cert
    )
    return Certs(ca, cert, key)
