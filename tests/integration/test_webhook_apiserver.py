"""The admission webhook behind a real kube-apiserver: dry-run creates of good and bad claims and templates.

The webhook runs as its own process (``python -m webhook.main``, what ``dra-gpu-webhook``
runs) with a throw-away certificate; the API server calls it through a
ValidatingWebhookConfiguration whose rules are the Helm chart's own, pointed at
``https://127.0.0.1:<port>`` and limited to namespaces of this module (other tests share the
API server). A bad config must be rejected with its field path, and with the words the kubelet
plugin uses when the same config reaches prepare without the webhook.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.config import API_VERSION
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import ApiError, LocalCluster, free_port
from testkit.helm_cli import CHART, RELEASE, Helm
from testkit.plugin_process import PluginProcess
from testkit.webhookcerts import Certs, make_certs

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK = "claim-parameters.resource.dra-gpu.dev"  # the chart's webhook name
SELECTOR_LABEL = "webhook-test.dra-gpu.dev/checked"
RESOURCE_API = "/apis/resource.k8s.io"


def gpu_config(sharing: Any = None, kind: str = "GpuConfig") -> dict[str, Any]:
    cfg: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind}
    if sharing is not None:
        cfg["sharing"] = sharing
    return cfg


GOOD_CONFIGS = [
    gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
    gpu_config(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"gpu-0": "20G"},
            },
        }
    ),
    gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}}, kind="MigDeviceConfig"),
    gpu_config(),
]
MAGIC = gpu_config({"strategy": "Magic"})
HALF_BYTE = gpu_config({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1.5"}})


# -- objects ----------------------------------------------------------------------------------


def claim_spec(version: str, configs: list[dict[str, Any]], driver: str = DRIVER) -> dict[str, Any]:
    """A claim spec in ``version``'s shape (v1beta1 requests have no ``exactly``)."""
    request: dict[str, Any] = {"name": "gpu"}
    if version == "v1beta1":
        request["deviceClassName"] = "gpu.dra-gpu.dev"
    else:
        request["exactly"] = {"deviceClassName": "gpu.dra-gpu.dev"}
    entries = [{"opaque": {"driver": driver, "parameters": p}} for p in configs]
    return {"devices": {"requests": [request], "config": entries}}


def claim_object(kind: str, version: str, namespace: str, configs: list[dict[str, Any]]) -> dict[str, Any]:
    spec = claim_spec(version, configs)
    meta = {"name": f"w-{uuid.uuid4().hex[:8]}", "namespace": namespace}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": kind, "metadata": meta, "spec": spec}


def collection(obj: Mapping[str, Any]) -> str:
    version = obj["apiVersion"].split("/")[1]
    plural = obj["kind"].lower() + "s"
    return f"{RESOURCE_API}/{version}/namespaces/{obj['metadata']['namespace']}/{plural}"


def dry_run_create(cluster: LocalCluster, obj: Mapping[str, Any]) -> dict[str, Any]:
    return cluster.api("POST", collection(obj) + "?dryRun=All", obj)


def rejection(cluster: LocalCluster, obj: Mapping[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as err:
        dry_run_create(cluster, obj)
    return err.value


def denied_prefix() -> str:
    return f'admission webhook "{WEBHOOK}" denied the request: '


# -- the webhook process and its registration -------------------------------------------------


@dataclass
class WebhookProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]


def start_webhook(tmp: Path, cert: Path, key: Path, ca: Path, server_name: str = "127.0.0.1") -> WebhookProcess:
    """Run the webhook app with ``cert``/``key`` on a free port; wait until /readyz answers over TLS."""
    port = free_port()
    log = tmp / f"webhook-{port}.log"
    argv = [sys.executable, "-m", "webhook.main", "--bind-address", "127.0.0.1", "--port", str(port)]
    argv += ["--tls-cert-file", str(cert), "--tls-private-key-file", str(key), "--driver-name", DRIVER, "--log-level", "debug"]
    argv += ["--metrics-port", "0", "--metrics-address", "127.0.0.1"]  # webhooks of several tests may run at once
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"webhook exited {proc.returncode}:\n{log.read_text()}")
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
                ctx.wrap_socket(raw, server_hostname=server_name) as tls,
            ):
                tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: webhook\r\nConnection: close\r\n\r\n")
                if tls.recv(100).startswith(b"HTTP/1.1 200"):
                    return WebhookProcess(proc, port, log)
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"webhook not ready after 30 s:\n{log.read_text()}")
        time.sleep(0.1)


def stop_webhook(w: WebhookProcess) -> int:
    w.proc.send_signal(signal.SIGTERM)
    try:
        return w.proc.wait(15)
    except subprocess.TimeoutExpired:
        w.proc.kill()
        return w.proc.wait()


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm.built(tmp_path_factory.mktemp("helm-home"))


def chart_objects(helm: Helm, *sets: str) -> dict[str, dict[str, Any]]:
    """The chart rendered with the webhook on: ``<Kind>/<name>`` → object."""
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in helm.template("webhook.enabled=true", *sets)}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("webhook-tls"))


@pytest.fixture(scope="module")
def webhook(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    w = start_webhook(tmp_path_factory.mktemp("webhook"), certs.cert, certs.key, certs.ca)
    yield w
    stop_webhook(w)


def create_namespace(cluster: LocalCluster, checked: bool) -> str:
    name = f"webhook-{uuid.uuid4().hex[:6]}"
    labels = {SELECTOR_LABEL: "true"} if checked else {}
    cluster.api(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    return name


def wait_enforced(cluster: LocalCluster, namespace: str, timeout_s: float = 30.0) -> None:
    """Until the API server calls the webhook for ``namespace`` (its informers lag a little)."""
    deadline = time.monotonic() + timeout_s
    probe = claim_object("ResourceClaim", "v1", namespace, [MAGIC])
    while True:
        try:
            dry_run_create(cluster, probe)
        except ApiError as err:
            if WEBHOOK in str(err):
                return
            raise
        if time.monotonic() > deadline:
            raise AssertionError(f"the webhook was not called for namespace {namespace} within {timeout_s} s")
        time.sleep(0.2)


@dataclass
class Registered:
    cluster: LocalCluster
    namespace: str
    webhook: WebhookProcess


@pytest.fixture(scope="module")
def registered(apiserver: LocalCluster, webhook: WebhookProcess, certs: Certs, helm: Helm) -> Iterator[Registered]:
    """The chart's ValidatingWebhookConfiguration, pointed at the local process and at labelled namespaces only."""
    (vwc,) = (o for k, o in chart_objects(helm).items() if k.startswith("ValidatingWebhookConfiguration/"))
    vwc = copy.deepcopy(vwc)
    vwc["metadata"] = {"name": f"dra-gpu-webhook-test-{uuid.uuid4().hex[:6]}"}
    hook = vwc["webhooks"][0]
    url = f"https://127.0.0.1:{webhook.port}{hook['clientConfig']['service']['path']}"
    hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(certs.ca.read_bytes()).decode()}
    hook["namespaceSelector"] = {"matchLabels": {SELECTOR_LABEL: "true"}}
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    apiserver.api("POST", path, vwc)
    namespace = create_namespace(apiserver, checked=True)
    try:
        wait_enforced(apiserver, namespace)
        yield Registered(apiserver, namespace, webhook)
    finally:
        apiserver.api("DELETE", f"{path}/{vwc['metadata']['name']}")
        apiserver.api("DELETE", f"/api/v1/namespaces/{namespace}")


# -- admission ---------------------------------------------------------------------------------

KINDS_AND_VERSIONS = [(k, v) for k in ("ResourceClaim", "ResourceClaimTemplate") for v in ("v1", "v1beta2", "v1beta1")]
IDS = [f"{k}-{v}" for k, v in KINDS_AND_VERSIONS]


@pytest.mark.parametrize(("kind", "version"), KINDS_AND_VERSIONS, ids=IDS)
def test_good_configs_are_admitted(registered: Registered, kind: str, version: str) -> None:
    """Every kind of our config, and another driver's anything, passes the webhook; dry-run stores nothing."""
    obj = claim_object(kind, version, registered.namespace, GOOD_CONFIGS)
    for_other = claim_spec(version, [{"anything": ["goes"]}], driver="gpu.other.dev")["devices"]["config"]
    devices = obj["spec"]["devices"] if kind == "ResourceClaim" else obj["spec"]["spec"]["devices"]
    devices["config"] += for_other
    created = dry_run_create(registered.cluster, obj)
    created_devices = created["spec"]["devices"] if kind == "ResourceClaim" else created["spec"]["spec"]["devices"]
    assert len(GOOD_CONFIGS) + 1 == len(created_devices["config"])
    with pytest.raises(ApiError) as err:
        registered.cluster.api("GET", f"{collection(obj)}/{obj['metadata']['name']}")
    assert 404 == err.value.status


@pytest.mark.parametrize(("kind", "version"), KINDS_AND_VERSIONS, ids=IDS)
def test_bad_configs_are_rejected_with_their_field_paths(registered: Registered, kind: str, version: str) -> None:
    """One message per bad config, each with its full path (spec.spec for templates); 422 Invalid."""
    prefix = "spec" if kind == "ResourceClaim" else "spec.spec"
    err = rejection(registered.cluster, claim_object(kind, version, registered.namespace, [GOOD_CONFIGS[0], MAGIC, HALF_BYTE]))
    assert 422 == err.status
    assert "Invalid" == err.body.get("reason")
    assert err.body["message"] == (
        f"{denied_prefix()}2 configs failed to validate: "
        f"object at {prefix}.devices.config[1].opaque.parameters is invalid: "
        "sharing.strategy: unknown value 'Magic'; supported: TimeSlicing, MPS; "
        f"object at {prefix}.devices.config[2].opaque.parameters is invalid: "
        "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: '1.5' is not a whole number of bytes"
    )


BAD_FOR_BOTH = {
    "strategy": MAGIC,
    "half-byte": HALF_BYTE,
    "unknown-field": {"junk": 1},
    "mixed": gpu_config({"strategy": "TimeSlicing", "mpsConfig": {}}),
    "threads": gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
}


def test_the_webhook_and_prepare_say_the_same(registered: Registered, plugin: PluginProcess) -> None:
    """Without the webhook, the plugin fails the claim at prepare with the same words after the path."""
    for label, params in BAD_FOR_BOTH.items():
        err = rejection(registered.cluster, claim_object("ResourceClaim", "v1", registered.namespace, [params]))
        one = f"{denied_prefix()}1 config failed to validate: object at spec.devices.config[0].opaque.parameters is invalid: "
        assert err.body["message"].startswith(one), (label, err.body["message"])
        detail = err.body["message"][len(one) :]
        # The allocated claim lives in "default", where the webhook is not registered, as if it were off.
        alloc = [{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": params}}]
        ns, uid, name = create_allocated_claim(registered.cluster, name=f"w-{uuid.uuid4().hex[:8]}", config=alloc)
        error = plugin.prepare([(ns, uid, name)]).claims[uid].error
        assert error.endswith(f"allocation.devices.config[0].opaque.parameters.{detail}"), (label, error, detail)


def test_metadata_updates_of_objects_stored_before_the_webhook_pass(registered: Registered) -> None:
    """A template with a bad config stored before the webhook covered its namespace still takes label updates."""
    cluster = registered.cluster
    ns = create_namespace(cluster, checked=False)
    try:
        tmpl = claim_object("ResourceClaimTemplate", "v1", ns, [MAGIC])
        cluster.api("POST", collection(tmpl), tmpl)  # not checked yet
        cluster.api(
            "PATCH",
            f"/api/v1/namespaces/{ns}",
            {"metadata": {"labels": {SELECTOR_LABEL: "true"}}},
            "application/merge-patch+json",
        )
        wait_enforced(cluster, ns)
        url = f"{collection(tmpl)}/{tmpl['metadata']['name']}"
        # PUT, not a merge patch: kube-apiserver v1.36 rejects a metadata-only merge patch of any claim
        # or template with opaque parameters as a change of the immutable spec, webhook or not.
        stored = cluster.api("GET", url)
        stored["metadata"]["labels"] = {"touched": "yes"}
        updated = cluster.api("PUT", url, stored)
        assert "yes" == updated["metadata"]["labels"]["touched"]
        reviewed = [
            e
            for e in registered.webhook.logs()
            if e.get("event") == "admission_reviewed" and e.get("name") == tmpl["metadata"]["name"]
        ]
        assert [("UPDATE", True)] == [(e["operation"], e["allowed"]) for e in reviewed]
    finally:
        cluster.api("DELETE", f"/api/v1/namespaces/{ns}")


def test_each_review_is_logged_as_json(registered: Registered) -> None:
    """One structured line per review: who, what, and the verdict."""
    obj = claim_object("ResourceClaim", "v1", registered.namespace, [MAGIC])
    rejection(registered.cluster, obj)
    time.sleep(0.2)
    (line,) = [
        e
        for e in registered.webhook.logs()
        if e.get("event") == "admission_reviewed" and e.get("name") == obj["metadata"]["name"]
    ]
    assert ("CREATE", "ResourceClaim", registered.namespace, False, 1) == (
        line["operation"],
        line["kind"],
        line["namespace"],
        line["allowed"],
        line["invalid_configs"],
    )
    assert "sharing.strategy" in line["message"]


# -- the chart ---------------------------------------------------------------------------------


def test_chart_renders_nothing_of_the_webhook_by_default(helm: Helm) -> None:
    """Off unless webhook.enabled."""
    objects = {(d["kind"], d["metadata"].get("labels", {}).get("app.kubernetes.io/component")) for d in helm.template()}
    assert not {kind for kind, _ in objects} & {"ValidatingWebhookConfiguration", "Secret"}
    assert not {component for _, component in objects} & {"webhook"}  # the plugin's metrics Service is not the webhook's


def test_chart_with_the_webhook_lints_strict_and_its_values_are_checked(helm: Helm) -> None:
    """helm lint --strict passes with the webhook on; the schema rejects a bad webhook value, naming it."""
    out = helm.run("lint", "--strict", str(CHART), "--set", "webhook.enabled=true", "--set", "webhook.replicas=2").stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    for bad, mentions in (
        ("webhook.failurePolicy=Never", "failurePolicy"),
        ("webhook.timeoutSeconds=60", "timeoutSeconds"),
        ("webhook.typo=1", "typo"),
    ):
        proc = helm.run("template", RELEASE, str(CHART), "--set", "webhook.enabled=true", "--set", bad, check=False)
        assert proc.returncode != 0 and mentions in proc.stdout + proc.stderr, (bad, proc.stderr)


def test_chart_webhook_objects_are_accepted_by_the_api_server(helm: Helm, apiserver: LocalCluster) -> None:
    """Every rendered webhook object passes the API server's validation (dry-run), with the chart's rules."""
    objs = chart_objects(helm, "webhook.namespaceSelector.matchLabels.team=ml")
    vwc = objs["ValidatingWebhookConfiguration/dra-gpu-claim-parameters"]
    (hook,) = vwc["webhooks"]
    assert ("Fail", "None", ["v1"]) == (hook["failurePolicy"], hook["sideEffects"], hook["admissionReviewVersions"])
    assert {
        "name": "dra-gpu-webhook",
        "namespace": "dra-gpu",
        "path": "/validate-resource-claim-parameters",
        "port": 443,
    } == hook["clientConfig"]["service"]
    (rule,) = hook["rules"]
    assert {"CREATE", "UPDATE"} == set(rule["operations"])
    assert {"resourceclaims", "resourceclaimtemplates"} == set(rule["resources"])
    assert {"v1", "v1beta1", "v1beta2"} == set(rule["apiVersions"])
    assert {"matchLabels": {"team": "ml"}} == hook["namespaceSelector"]
    apiserver.api("POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations?dryRun=All", vwc)
    ns = create_namespace(apiserver, checked=False)
    try:
        for key in (
            "ServiceAccount/dra-gpu-webhook",
            "Service/dra-gpu-webhook",
            "Deployment/dra-gpu-webhook",
            "Secret/dra-gpu-webhook-tls",
        ):
            obj = copy.deepcopy(objs[key])
            obj["metadata"]["namespace"] = ns
            group_version = obj["apiVersion"]
            base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            apiserver.api("POST", f"{base}/namespaces/{ns}/{obj['kind'].lower()}s?dryRun=All", obj)
    finally:
        apiserver.api("DELETE", f"/api/v1/namespaces/{ns}")
    pod = objs["Deployment/dra-gpu-webhook"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert ["dra-gpu-webhook"] == container["command"]
    env = {"PORT", "TLS_CERT_FILE", "TLS_PRIVATE_KEY_FILE", "DRIVER_NAME", "LOG_LEVEL", "METRICS_PORT", "METRICS_ADDRESS"}
    assert env == {e["name"] for e in container["env"]}
    # Metrics listen on the pod's own address, not every address (private by default).
    (address,) = (e for e in container["env"] if e["name"] == "METRICS_ADDRESS")
    assert {"fieldRef": {"fieldPath": "status.podIP"}} == address["valueFrom"]
    assert (True, False) == (pod["securityContext"]["runAsNonRoot"], pod["automountServiceAccountToken"])


def test_chart_certificate_is_served_and_verifies_for_the_service_name(helm: Helm, tmp_path: Path) -> None:
    """Helm's genCA/genSignedCert pair works with the server; the caBundle verifies it for <svc>.<ns>.svc."""
    objs = chart_objects(helm)
    data = objs["Secret/dra-gpu-webhook-tls"]["data"]
    files = {}
    for name in ("ca.crt", "tls.crt", "tls.key"):
        files[name] = tmp_path / name
        files[name].write_bytes(base64.b64decode(data[name]))
    ca_bundle = base64.b64decode(
        objs["ValidatingWebhookConfiguration/dra-gpu-claim-parameters"]["webhooks"][0]["clientConfig"]["caBundle"]
    )
    assert files["ca.crt"].read_bytes() == ca_bundle
    w = start_webhook(tmp_path, files["tls.crt"], files["tls.key"], files["ca.crt"], server_name="dra-gpu-webhook.dra-gpu.svc")
    try:
        ctx = ssl.create_default_context(cafile=str(files["ca.crt"]))
        conn = http.client.HTTPSConnection("127.0.0.1", w.port, context=ctx, timeout=10)
        conn.sock = ctx.wrap_socket(
            socket.create_connection(("127.0.0.1", w.port), timeout=10), server_hostname="dra-gpu-webhook.dra-gpu.svc"
        )
        try:
            conn.request("GET", "/readyz")
            resp = conn.getresponse()
            assert (200, b"ok\n") == (resp.status, resp.read())
        finally:
            conn.close()
    finally:
        assert 0 == stop_webhook(w)  # SIGTERM: a clean exit
