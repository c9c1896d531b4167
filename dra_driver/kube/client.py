"""Loading an API server connection: the pod's service account, or a kubeconfig file.

Called once at start-up by the apps (the kubelet plugin, the standalone controller, ``dra-gpu
explain``) and by tests; the resulting ``ApiConnection`` is handed to adapters such as
``KubeSliceApi``. What a node daemon needs is read here without the ``kubernetes`` package (its
client is ~20 MiB and ~0.5 s of start-up for a process that makes a handful of raw JSON calls):

* in-cluster: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the service account's CA and its token file
  (re-read as the kubelet rotates it);
* a kubeconfig's current context: the cluster's ``server``, ``certificate-authority(-data)``,
  ``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``; the user's
  ``client-certificate(-data)``, ``client-key(-data)``, ``token`` and ``tokenFile``. Relative paths
  are relative to the kubeconfig's directory, as kubectl reads them.

A plain ``http://`` server is refused (``KubeConfigError`` naming the kubeconfig and the server)
unless its cluster sets ``insecure-skip-tls-verify: true``; then it is spoken to in plain HTTP,
never dialled with TLS.

A kubeconfig that needs more (an ``exec`` credential plugin, an ``auth-provider``, a user name and
password: what laptops running ``dra-gpu explain`` often have) is loaded by the ``kubernetes``
package's loader instead, whose refreshing token then goes with each request. Every failure is a
``KubeConfigError`` naming the file and what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dra_driver.kube.connection import ApiConnection, TokenSource

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_KUBECONFIG_BYTES = 4 << 20
NATIVE_USER_KEYS = frozenset(
    {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token", "tokenFile"}
)
"""User fields read here; a user with any other field set (exec, auth-provider, username...) goes to the kubernetes loader."""
NATIVE_CLUSTER_KEYS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name", "proxy-url"}
)


class KubeConfigError(ValueError):
    """The connection cannot be configured (a missing file, a bad kubeconfig, no service account)."""


def load_api_client(kubeconfig: str | None) -> ApiConnection:
    """The connection for ``kubeconfig`` (a file path), or for the pod's service account when None."""
    if kubeconfig:
        return _from_kubeconfig(Path(kubeconfig))
    return _in_cluster(SERVICE_ACCOUNT_DIR, os.environ)


def _in_cluster(sa_dir: Path, env: os._Environ[str] | dict[str, str]) -> ApiConnection:
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("not in a pod: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set; pass --kubeconfig")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    try:
        ctx = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
        token = TokenSource(path=sa_dir / "token")
    except (OSError, ValueError, ssl.SSLError) as err:
        raise KubeConfigError(f"service account credentials in {sa_dir}: {err}") from err
    return ApiConnection(f"https://{host}:{port}", ssl_context=ctx, token=token)


def _named(doc: dict[str, Any], kind: str, name: str, where: Path) -> dict[str, Any]:
    for item in doc.get(kind + "s") or []:
        if isinstance(item, dict) and item.get("name") == name:
            value = item.get(kind)
            return value if isinstance(value, dict) else {}
    raise KubeConfigError(f"{where}: no {kind} named {name!r}")


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    """The kubeconfig's document: JSON when it is JSON (a subset of YAML), else YAML.

    The YAML parser is loaded only for a kubeconfig that is not JSON (about 0.9 MiB of a daemon's
    resident memory; in a pod the plugin reads no kubeconfig at all).
    """
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_KUBECONFIG_BYTES + 1)
    except OSError as err:
        raise KubeConfigError(f"kubeconfig {path}: {err.strerror or err}") from err
    if len(raw) > MAX_KUBECONFIG_BYTES:
        raise KubeConfigError(f"kubeconfig {path} is over {MAX_KUBECONFIG_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = _yaml_document(raw, path)
    if not isinstance(doc, dict):
        raise KubeConfigError(f"kubeconfig {path} is not a mapping")
    return doc


def _yaml_document(raw: bytes, path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise KubeConfigError(f"kubeconfig {path} is not YAML: {str(err)[:200]}") from err


def _from_kubeconfig(path: Path) -> ApiConnection:
    doc = _read_kubeconfig(path)
    current = doc.get("current-context")
    if not current:
        raise KubeConfigError(f"kubeconfig {path} has no current-context")
    context = _named(doc, "context", str(current), path)
    cluster = _named(doc, "cluster", str(context.get("cluster") or ""), path)
    user = _named(doc, "user", str(context.get("user") or ""), path) if context.get("user") else {}
    if set(k for k, v in user.items() if v) - NATIVE_USER_KEYS or set(cluster) - NATIVE_CLUSTER_KEYS - {"extensions"}:
        return _via_kubernetes_package(path)
    server = str(cluster.get("server") or "")
    if not server:
        raise KubeConfigError(f"kubeconfig {path}: cluster {context.get('cluster')!r} has no server")
    where = f"cluster {context.get('cluster')!r}"
    plain = _plain_http(path, where, server, insecure=bool(cluster.get("insecure-skip-tls-verify")))
    base = path.parent
    try:
        ctx = None if plain else _tls_context(cluster, user, base)
        token = _token(user, base)
        return ApiConnection(
            server,
            ssl_context=ctx,
            token=token,
            tls_server_name=str(cluster.get("tls-server-name") or ""),
            proxy=str(cluster["proxy-url"]) if cluster.get("proxy-url") else None,
        )
    except (OSError, ValueError, ssl.SSLError, binascii.Error) as err:
        raise KubeConfigError(f"kubeconfig {path}: {err}") from err


def _plain_http(path: Path, where: str, server: str, *, insecure: bool) -> bool:
    """Whether ``server`` is a plain ``http://`` one, allowed; KubeConfigError unless the cluster says it is insecure.

    The Kubernetes API over plain HTTP is for local test servers and ``kubectl proxy``: the token
    and every object cross the wire in clear, and nothing proves which server answers. So it is
    refused, naming the kubeconfig and the server, unless the cluster entry opts out of
    verification explicitly (``insecure-skip-tls-verify: true``); never dialled with TLS.
    """
    if urlsplit(server).scheme != "http":
        return False
    if not insecure:
        raise KubeConfigError(
            f"kubeconfig {path}: {where} has server {server!r}, plain http: the token and objects would "
            "cross the wire in clear to a server nothing verifies. Use its https:// address, or, for a local test "
            "server or kubectl proxy only, set insecure-skip-tls-verify: true on the cluster to accept plain http"
        )
    return True


def _resolve(base: Path, value: Any) -> Path:
    p = Path(str(value)).expanduser()
    return p if p.is_absolute() else base / p


def _data(value: Any, what: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except binascii.Error as err:
        raise KubeConfigError(f"{what} is not base64: {err}") from err


def _tls_context(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    # With a CA named, only that CA is trusted (as kubectl does); without one, the system's roots.
    if cluster.get("insecure-skip-tls-verify"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cadata=_data(cluster["certificate-authority-data"], "certificate-authority-data").decode())
    elif cluster.get("certificate-authority"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cafile=str(_resolve(base, cluster["certificate-authority"])))
    else:
        ctx = ssl.create_default_context()
    cert = _pem(user, "client-certificate", base)
    key = _pem(user, "client-key", base)
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise KubeConfigError("a client certificate needs both client-certificate and client-key")
        _load_cert_chain(ctx, cert, key)
    return ctx


def _pem(user: dict[str, Any], field: str, base: Path) -> bytes | None:
    if user.get(field + "-data"):
        return _data(user[field + "-data"], field + "-data")
    if user.get(field):
        return _resolve(base, user[field]).read_bytes()
    return None


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads files only: the PEMs go to an owner-only temp dir, removed at once."""
    import tempfile  # loaded only for client certificates (tempfile brings shutil and the compressors)

    with tempfile.TemporaryDirectory(prefix="dra-gpu-cert-") as tmp:
        cert_file, key_file = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        for p, data in ((cert_file, cert), (key_file, key)):
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(str(cert_file), str(key_file))


def _token(user: dict[str, Any], base: Path) -> TokenSource:
    if user.get("token"):
        return TokenSource(token=str(user["token"]))
    if user.get("tokenFile"):
        return TokenSource(path=_resolve(base, user["tokenFile"]))
    return TokenSource()


def _via_kubernetes_package(path: Path) -> ApiConnection:
    """The ``kubernetes`` package's loader, for what ``_from_kubeconfig`` does not read; its token refreshes."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=str(path), client_configuration=cfg, persist_config=False)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError) as err:
        raise KubeConfigError(f"kubeconfig {path}: {err}") from err
    if _plain_http(path, "the current context's cluster", str(cfg.host), insecure=not cfg.verify_ssl):
        return ApiConnection(str(cfg.host), token=TokenSource(refresh=lambda: _auth_header(cfg)), proxy=cfg.proxy or None)
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)

    return ApiConnection(
        str(cfg.host),
        ssl_context=ctx,
        token=TokenSource(refresh=lambda: _auth_header(cfg)),
        tls_server_name=str(getattr(cfg, "tls_server_name", "") or ""),
        proxy=cfg.proxy or None,
    )


def _auth_header(cfg: Any) -> str:
    """The token as the ``kubernetes`` package's own client would send it (its refresh hook runs exec plugins again)."""
    bearer = cfg.auth_settings().get("BearerToken")
    if bearer and bearer.get("value"):
        return str(bearer["value"])
    basic = cfg.get_basic_auth_token() if cfg.username or cfg.password else None
    return str(basic) if basic else ""
