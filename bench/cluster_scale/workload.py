"""What users put in the cluster: the chart's DeviceClasses, a claim template from demo/, and the pods.

Used by ``bench.cluster_scale.run``. The DeviceClasses are the Helm chart's (``helm template``,
as installed; when the Helm binary is not built, the same two objects written out here). The
claim templates are the demo's, moved to the bench's namespace: ``full`` pods ask for one GPU
by product name (demo/gpu-h100.yaml), ``mig`` pods for one 1g.10gb MIG device
(demo/mig-1g.yaml). Each pod has one claim from its template, which the resourceclaim
controller creates. ``Bindings`` watches the namespace's pods and notes when each gets its
node; ``create_pods`` creates them from several threads, each over its own connection.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench.cluster_scale.api import Api, Watch
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from testkit.cluster import ApiError

NS = "bench"
REPO = Path(__file__).resolve().parents[2]
DEMO_TEMPLATES = {"full": ("gpu-h100.yaml", "h100"), "mig": ("mig-1g.yaml", "mig-1g")}
RESOURCE = "/apis/resource.k8s.io/v1"
PODS = f"/api/v1/namespaces/{NS}/pods"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def device_classes() -> tuple[list[dict[str, Any]], str]:
    """The chart's DeviceClasses (rendered by Helm if it is built) and where they came from."""
    from testkit.helm_cli import Helm, HelmError, by_kind

    try:
        with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-helm-") as home:
            docs = Helm.built(Path(home)).template("mig.strategy=dynamic")
        return list(by_kind(docs, "DeviceClass").values()), "Helm chart (helm template)"
    except (HelmError, OSError) as err:
        return _written_classes(), f"written like the chart's (Helm unavailable: {str(err)[:80]})"


def _written_classes() -> list[dict[str, Any]]:
    d = DEFAULT_DRIVER_NAME
    out = []
    for name, typ in ((d, "gpu"), (f"mig.{d}", "mig")):
        expr = f"device.driver == '{d}' && device.attributes['{d}'].type == '{typ}'"
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expr}}]},
            }
        )
    return out


def claim_template(layout: str) -> dict[str, Any]:
    """The demo's ResourceClaimTemplate for ``layout``, in the bench's namespace."""
    file, name = DEMO_TEMPLATES["full" if layout == "full" else "mig"]  # every MIG layout: one 1g.10gb
    for doc in yaml.safe_load_all((REPO / "demo" / file).read_text()):
        if doc and doc.get("kind") == "ResourceClaimTemplate" and doc["metadata"]["name"] == name:
            doc["metadata"] = {"name": name, "namespace": NS}
            return dict(doc)
    raise ValueError(f"demo/{file} has no ResourceClaimTemplate {name}")


def pod(name: str, template: str, scheduler: str = "default-scheduler") -> dict[str, Any]:
    """A pod with one claim from ``template`` (a pause container; no kubelet runs it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": scheduler,
            "automountServiceAccountToken": False,
            "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def setup(api: Api, layout: str) -> tuple[str, str]:
    """Namespace, its service account, the DeviceClasses and the template; (template name, classes' source)."""
    classes, source = device_classes()
    api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NS}}
    try:
        api.call("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", sa)
    except ApiError as err:
        if err.status != 409:
            raise
    for c in classes:
        api.call("POST", f"{RESOURCE}/deviceclasses", c)
    template = claim_template(layout)
    api.call("POST", f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates", template)
    return str(template["metadata"]["name"]), source


class Bindings:
    """Watches the namespace's pods; the moment each one is first seen bound (``spec.nodeName``)."""

    def __init__(self, api: Api) -> None:
        self._api = api
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._watch: Watch | None = None
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        rv = str((self._api.call("GET", f"{PODS}?limit=1").get("metadata") or {}).get("resourceVersion") or "")
        self._thread = threading.Thread(target=self._loop, args=(rv,), name="bindings", daemon=True)
        self._thread.start()

    def _loop(self, rv: str) -> None:
        while not self._stop.is_set():
            try:
                self._watch = self._api.watch(PODS, rv)
                for kind, obj in self._watch.events():
                    now = time.monotonic()
                    meta = obj.get("metadata") or {}
                    rv = str(meta.get("resourceVersion") or rv)
                    node = (obj.get("spec") or {}).get("nodeName")
                    if kind in ("ADDED", "MODIFIED") and node:
                        name = str(meta.get("name"))
                        with self._changed:
                            if name not in self.bound:
                                self.bound[name] = now
                                self.nodes[name] = str(node)
                                self._changed.notify_all()
            except (ApiError, OSError, ValueError) as err:
                if self._stop.is_set():
                    return
                self.error = f"{type(err).__name__}: {err}"
                self._stop.wait(1.0)

    def wait(self, names: set[str], until: float) -> bool:
        """Wait until every pod in ``names`` is bound, or ``until`` (monotonic); whether all are."""
        with self._changed:
            while not names <= self.bound.keys():
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 1.0))
            return True

    def snapshot(self) -> dict[str, float]:
        """A copy of ``bound`` (pod name -> monotonic time first seen bound)."""
        with self._lock:
            return dict(self.bound)

    def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.close()
        if self._thread is not None:
            self._thread.join(5.0)


def create_pods(api: Api, names: list[str], make: Callable[[str], dict[str, Any]], threads: int) -> dict[str, float]:
    """Create the pods from ``threads`` threads; each pod's creation time (monotonic, just before its POST)."""
    created: dict[str, float] = {}

    def one(name: str) -> None:
        body = make(name)
        created[name] = time.monotonic()
        api.call("POST", PODS, body)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, names))
    return created
