"""A stand-in Kubernetes API server: objects in memory, raw JSON over HTTP(S), standard library only.

Used by ``testkit.gpu_check.flow`` (``make gpu-check``) to run the real kubelet plugin on a GPU
machine without a cluster, and by tests that need an API server answering a CLI's reads
(``tests/integration/test_cli_output.py``). It serves what the plugin and ``dra-gpu`` call:
``/version``; discovery of ``/apis/<group>/<version>`` (the resources it holds objects of, and
those in ``discovery``); get, list (field and label selectors of ``key=value`` terms, one page), watch
(chunked, from a resourceVersion, until ``timeoutSeconds``), create (``generateName`` too),
replace (a stale ``resourceVersion`` is a 409), delete, and patch (server-side apply of
``status.devices`` merged per driver, pool, device and share; JSON merge patch otherwise) of any
resource under ``/api/v1`` and ``/apis/<group>/<version>``, cluster-wide or namespaced; a pod's
``proxy`` subresource is forwarded to ``127.0.0.1:<port>``. It validates nothing a real server
would (schemas, admission, authorization) and keeps every request it answered in ``calls`` so a
run can report the API surface it met. Errors are ``Status`` objects, as a real server's are.
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

APPLY_PATCH = "application/apply-patch+yaml"
DEFAULT_VERSION = {"major": "1", "minor": "35", "gitVersion": "v1.35.0-dra-gpu-stand-in", "platform": "linux/amd64"}
TOKEN = "dra-gpu-stand-in"
MAX_BODY = 64 << 20


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request points: an API prefix, resource, namespace (or ""), object name (or ""), subresource."""

    prefix: str
    resource: str
    namespace: str = ""
    name: str = ""
    sub: str = ""
    rest: str = ""


@dataclass(frozen=True, slots=True)
class Call:
    """One request the stand-in answered."""

    method: str
    path: str
    status: int
    authorized: bool


@dataclass(slots=True)
class _Event:
    rv: int
    kind: str
    key: tuple[str, str, str, str]
    obj: dict[str, Any]


@dataclass(slots=True)
class _Store:
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)
    rv: int = 100


class ApiError(Exception):
    """Answered as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def parse_target(path: str) -> Target | None:
    """``/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status`` → its parts; None for other paths."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        prefix, rest = "/api/v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        prefix, rest = f"/apis/{parts[1]}/{parts[2]}", parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return Target(prefix, resource, namespace, name, sub, "/".join(rest[3:]))


def _lookup(obj: Any, dotted: str) -> str:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return "" if obj is None else str(obj)


def _selected(obj: dict[str, Any], fields: str, labels: str) -> bool:
    for term in filter(None, fields.split(",")):
        key, _, want = term.partition("=")
        if _lookup(obj, key.rstrip("=")) != want.lstrip("="):
            return False
    got = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, labels.split(",")):
        key, _, want = term.partition("=")
        if str(got.get(key.rstrip("="))) != want.lstrip("="):
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _device_key(entry: Any) -> tuple[str, str, str, str]:
    e = entry if isinstance(entry, dict) else {}
    return (str(e.get("driver")), str(e.get("pool")), str(e.get("device")), str(e.get("shareID") or ""))


def apply_status(stored: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply of a claim's status as the API declares it: ``status.devices`` is a map keyed per device."""
    out = copy.deepcopy(stored)
    status = dict(out.get("status") or {})
    for k, v in (patch.get("status") or {}).items():
        if k != "devices":
            status[k] = copy.deepcopy(v)
            continue
        merged = {_device_key(d): d for d in status.get("devices") or []}
        for d in v or []:
            merged[_device_key(d)] = copy.deepcopy(d)
        status["devices"] = list(merged.values())
    out["status"] = status
    return out


class StandInApiServer:
    """The server, on ``127.0.0.1`` at a free port; ``start``/``stop`` or a ``with`` block."""

    def __init__(self, *, tls_dir: Path | None = None, version: dict[str, str] | None = None) -> None:
        """``tls_dir``: serve HTTPS with a CA and certificate made there (``openssl``); None: plain HTTP."""
        self._store = _Store()
        self._lock = threading.Condition()
        self._version = version or DEFAULT_VERSION
        self._stopping = False
        self.calls: list[Call] = []
        self.discovery: dict[str, set[str]] = {}
        """Resources ``GET /apis/<group>/<version>`` lists (by ``/apis/<group>/<version>``), besides those it holds objects of."""
        self.ca_file: Path | None = None
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        if tls_dir is not None:
            self.ca_file, cert, key = make_tls(tls_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(cert), str(key))
            self._http.socket = ctx.wrap_socket(self._http.socket, server_side=True, do_handshake_on_connect=False)
        self.port = int(self._http.server_address[1])
        self.url = f"{'https' if tls_dir is not None else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._http.serve_forever, name="stand-in-apiserver", daemon=True)

    def __enter__(self) -> StandInApiServer:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Serve on a thread of its own."""
        self._thread.start()

    def stop(self) -> None:
        """End every watch and stop serving."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        self._http.shutdown()
        self._http.server_close()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server (its CA, a bearer token), as ``dra_driver.kube.client`` reads it."""
        cluster: dict[str, Any] = {"server": self.url}
        if self.ca_file is not None:
            cluster["certificate-authority"] = str(self.ca_file)
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stand-in", "cluster": cluster}],
            "users": [{"name": "stand-in", "user": {"token": TOKEN}}],
            "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in"}}],
            "current-context": "stand-in",
        }
        path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
        return path

    # -- the objects ------------------------------------------------------------------------------

    def put(self, api_path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` in the collection at ``api_path`` (e.g. ``/api/v1/nodes``) as a client's POST would."""
        target = parse_target(api_path)
        if target is None:
            raise ValueError(f"{api_path} is not an API collection")
        return self._create(target, obj)

    def objects(self, resource: str) -> list[dict[str, Any]]:
        """Every stored object of ``resource`` (e.g. ``resourceslices``), oldest first."""
        with self._lock:
            return [copy.deepcopy(o) for k, o in self._store.objects.items() if k[1] == resource]

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One stored object, or None."""
        with self._lock:
            for k, o in self._store.objects.items():
                if k[1:] == (resource, namespace, name):
                    return copy.deepcopy(o)
        return None

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """An ``APIResourceList`` for ``/apis/<group>/<version>`` naming what it serves; None when it serves nothing there."""
        prefix = path.rstrip("/")
        with self._lock:
            names = {k[1] for k in self._store.objects if k[0] == prefix} | self.discovery.get(prefix, set())
        if not names or not prefix.startswith("/apis/"):
            return None
        resources = [{"name": n, "namespaced": False, "kind": "", "verbs": []} for n in sorted(names)]
        group_version = prefix.removeprefix("/apis/")
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}

    def _key(self, t: Target, name: str) -> tuple[str, str, str, str]:
        return (t.prefix, t.resource, t.namespace, name)

    def _bump(self, kind: str, key: tuple[str, str, str, str], obj: dict[str, Any]) -> dict[str, Any]:
        self._store.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._store.rv)
        if kind == "DELETED":
            self._store.objects.pop(key, None)
        else:
            self._store.objects[key] = obj
        self._store.events.append(_Event(self._store.rv, kind, key, copy.deepcopy(obj)))
        self._lock.notify_all()
        return copy.deepcopy(obj)

    def _create(self, t: Target, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body is not an object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name or metadata.generateName is required")
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        if t.namespace:
            meta["namespace"] = t.namespace
        meta["uid"] = meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._lock:
            key = self._key(t, meta["name"])
            if key in self._store.objects:
                raise ApiError(409, "AlreadyExists", f"{t.resource} {meta['name']!r} already exists")
            return self._bump("ADDED", key, obj)

    def _stored(self, t: Target) -> dict[str, Any]:
        obj = self._store.objects.get(self._key(t, t.name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{t.resource} "{t.name}" not found')
        return obj

    def _replace(self, t: Target, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body is not an object")
        with self._lock:
            stored = self._stored(t)
            want = str((body.get("metadata") or {}).get("resourceVersion") or "")
            have = str(stored["metadata"].get("resourceVersion"))
            if want and want != have:
                raise ApiError(409, "Conflict", f"the object has been modified (resourceVersion {want} is not {have})")
            if t.sub == "status":
                new = copy.deepcopy(stored)
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new = copy.deepcopy(body)
                new["metadata"] = {**stored["metadata"], **(body.get("metadata") or {})}
                if "status" in stored and t.resource == "resourceclaims":
                    new["status"] = stored["status"]  # the status subresource's, as a real server keeps it
            return self._bump("MODIFIED", self._key(t, t.name), new)

    def _patch(self, t: Target, body: Any, content_type: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the patch is not an object")
        with self._lock:
            stored = self._stored(t)
            if content_type.startswith(APPLY_PATCH) and t.sub == "status":
                new = apply_status(stored, body)
            else:
                new = merge_patch(stored, body)
                new["metadata"] = stored["metadata"]
            return self._bump("MODIFIED", self._key(t, t.name), new)

    def _delete(self, t: Target) -> dict[str, Any]:
        with self._lock:
            stored = self._stored(t)
            self._bump("DELETED", self._key(t, t.name), copy.deepcopy(stored))
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}

    def _list(self, t: Target, q: dict[str, str]) -> dict[str, Any]:
        fields, labels = q.get("fieldSelector", ""), q.get("labelSelector", "")
        with self._lock:
            items = [
                copy.deepcopy(o)
                for k, o in self._store.objects.items()
                if k[:2] == (t.prefix, t.resource) and (not t.namespace or k[2] == t.namespace) and _selected(o, fields, labels)
            ]
            rv = str(self._store.rv)
        return {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}

    def _watch(self, t: Target, q: dict[str, str], send: Any) -> None:
        """Send the collection's events after ``resourceVersion`` until ``timeoutSeconds`` or ``stop``."""
        since = int(q.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 300)
        fields, labels = q.get("fieldSelector", ""), q.get("labelSelector", "")
        with self._lock:
            if not since:
                since = self._store.rv
            while not self._stopping and time.monotonic() < deadline:
                due = [
                    e
                    for e in self._store.events
                    if e.rv > since
                    and e.key[:2] == (t.prefix, t.resource)
                    and (not t.namespace or e.key[2] == t.namespace)
                    and _selected(e.obj, fields, labels)
                ]
                since = max([since, *(e.rv for e in self._store.events)])
                if due:
                    self._lock.release()
                    try:
                        for e in due:
                            send({"type": e.kind, "object": e.obj})
                    finally:
                        self._lock.acquire()
                    continue
                self._lock.wait(min(0.5, max(0.0, deadline - time.monotonic())))

    def _proxy(self, t: Target) -> tuple[int, bytes, str]:
        """A pod's ``<name>:<port>/proxy/<path>``, forwarded to ``http://127.0.0.1:<port>/<path>``."""
        _, _, port = t.name.rpartition(":")
        if not port.isdigit():
            raise ApiError(400, "BadRequest", f"proxy to {t.name!r}: no port")
        url = f"http://127.0.0.1:{int(port)}/{t.rest}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return int(resp.status), resp.read(), str(resp.headers.get("Content-Type") or "text/plain")
        except (urllib.error.URLError, OSError) as err:
            raise ApiError(503, "ServiceUnavailable", f"proxy to {url}: {err}") from None

    def _record(self, method: str, path: str, status: int, authorized: bool) -> None:
        with self._lock:
            self.calls.append(Call(method, path, status, authorized))


def _handler_for(server: StandInApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: ``calls`` holds what was asked."""

        def setup(self) -> None:
            super().setup()
            # Headers and body are two writes: without this, Nagle's algorithm holds the body until the
            # client's delayed ACK of the headers (40 ms), which would be timed as the plugin's.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.settimeout(30)
                self.connection.do_handshake()

        def _body(self) -> Any:
            size = int(self.headers.get("Content-Length") or 0)
            if size > MAX_BODY:
                raise ApiError(413, "RequestEntityTooLarge", "body too large")
            raw = self.rfile.read(size) if size else b""
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                raise ApiError(400, "BadRequest", "the body is not JSON") from None

        def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self, t: Target, q: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def send(event: dict[str, Any]) -> None:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()

            try:
                server._watch(t, q, send)
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True

        def _answer(self, method: str, path: str, q: dict[str, str]) -> int:
            """Answer one request (a watch streams); the status code sent. Raises ApiError."""
            if path == "/version" and method == "GET":
                self._send(200, json.dumps(server._version).encode())
                return 200
            t = parse_target(path)
            if t is None and method == "GET" and (listed := server._discovery(path)) is not None:
                self._send(200, json.dumps(listed).encode())
                return 200
            if t is None:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            code = 200
            if t.sub == "proxy" and method == "GET":
                code, data, ctype = server._proxy(t)
                self._send(code, data, ctype)
                return code
            if method == "GET" and not t.name and q.get("watch") in ("true", "1"):
                self._stream(t, q)
                return 200
            if method == "GET" and not t.name:
                out = server._list(t, q)
            elif method == "GET":
                with server._lock:
                    out = copy.deepcopy(server._stored(t))
            elif method == "POST" and not t.name:
                out, code = server._create(t, self._body()), 201
            elif method == "PUT" and t.name:
                out = server._replace(t, self._body())
            elif method == "PATCH" and t.name:
                out = server._patch(t, self._body(), self.headers.get("Content-Type") or "")
            elif method == "DELETE" and t.name:
                out = server._delete(t)
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} {path}")
            self._send(code, json.dumps(out).encode())
            return code

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            authorized = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            code = 0
            try:
                code = self._answer(method, parts.path, q)
            except ApiError as err:
                code = err.code
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": str(err)}
                self._send(code, json.dumps({**status, "reason": err.reason, "code": err.code}).encode())
            finally:
                server._record(method, parts.path, code, authorized)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


def make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a certificate for ``127.0.0.1``/``localhost`` it signed (``openssl``): CA, cert, key."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca, ca_key, cert, key, csr, ext = (directory / n for n in ("ca.crt", "ca.key", "tls.crt", "tls.key", "tls.csr", "san.ext"))

    def openssl(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=dra-gpu-stand-in-ca", "-keyout", ca_key, "-out", ca)
    openssl("req", *ec, "-subj", "/CN=dra-gpu-stand-in-apiserver", "-keyout", key, "-out", csr)
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    sign = ("-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-extfile", ext)
    openssl("x509", "-req", "-days", "2", "-in", csr, *sign, "-out", cert)
    return ca, cert, key
