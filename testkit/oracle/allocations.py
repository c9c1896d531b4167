"""Hypothesis strategies: small random clusters and one pod's claims, for the allocation differential.

A case is what ``testkit/go/cmd/celdiff`` takes as ``{"kind": "allocate", ...}``: node labels and
ResourceSlices (``cluster.py``), DeviceClasses (selector-free, by driver, by capacity, rarely a
failing one), already-allocated claims (dedicated, shared with consumed capacity, admin access)
and the pod's claims: ``ExactCount`` 1-3 and ``All`` requests and ``firstAvailable`` lists (``All``
subrequests too) with selectors (some reading list-typed attributes), tolerations (Equal/Exists,
with and without an effect), capacity requests (some in milli units), admin access and, rarely,
derived attributes, and ``matchAttribute``/``distinctAttribute`` constraints naming no, some or
sub- requests, over scalar, list-typed and mixed attributes. Some cases ask for the scheduler with
``DRAFractionalCapacityRange=true`` (``featureGates``), the rest for the release's defaults. With
the bulk pool the pod's last claim pushes against the 32-device limit: subrequests of 16-33
devices beside other requests, ``All`` requests that would go over it, and claims that are over
it at once. Every object is one the API server accepts (but for the rare
selector that does not compile, as one stored before a downgrade), with the fields it defaults
(allocation mode, count, toleration operator). Counts and claims are cut down where the search
could walk more than ``SEARCH_BOUND`` combinations; ``coverage.py`` counts what the cases hold.
"""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import strategies as st

from testkit.oracle.cluster import BULK_DRIVER, FLAWS, NODE, bulk_slices, node_labels, pool_slices, rng_of
from testkit.oracle.devices import Draw
from testkit.oracle.oracle import allocate_case

DRIVERS = ("gpu.dra-gpu.dev", "net.example.com")
FRACTIONAL_GATE = "DRAFractionalCapacityRange=true"  # beta in 1.37, off in a stock scheduler
FRACTIONAL_GATE_SINCE = 37
LISTS_CONVERT_SINCE = 37  # before, a device with a list-typed attribute fails every selector
# Selectors that cannot fail on any device ("{d}": the first driver).
SAFE_SELECTORS = (
    'device.attributes["{d}"].?numa.orValue(0) == 1',
    'has(device.attributes["{d}"].numa)',
    "device.allowMultipleAllocations",
    'device.attributes["{d}"].?migCapable.orValue(false)',
    'device.attributes["{d}"].?driverVersion.orValue(semver("0.0.0")).compareTo(semver("570.0.0")) >= 0',
    'device.attributes["{d}"].?model.orValue("") == "H100"',
    "true",
    # List-typed attributes (CEL lists from 1.37; before, any selector fails on such a device).
    '"nic1" in device.attributes["{d}"].?nics.orValue([])',
    'device.attributes["{d}"].?nics.orValue([]).size() > 1',
    'device.attributes["{d}"].?numa.orValue(0) == 1 || device.attributes["{d}"].?numa.orValue([]) == [0, 1]',
)
# Selectors that fail at run time on a device of another driver (fine behind the first driver's classes).
DRIVER_SELECTORS = (
    'device.attributes["{d}"].model == "H100"',
    'device.attributes["{d}"].model != "L4"',
    'device.capacity["{d}"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["{d}"].index % 2 == 0',
)
ERRORING_SELECTORS = (
    'device.attributes["{d}"].coolingType == "liquid"',  # runtime error: no such key
    'device.attributes["{d}"].model > 1',  # runtime error: no such overload
    "device.nope",  # compile error
)
TOLERATIONS = (
    {"key": "example.com/broken", "operator": "Exists"},
    {"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute"},
    {"key": "example.com/broken", "operator": "Equal", "value": ""},
    {"key": "example.com/broken", "operator": "Equal", "value": "", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "example.com/maint", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    {"key": "example.com/maint", "operator": "Equal", "value": "true"},
    {"key": "example.com/maint", "operator": "Exists", "effect": "None"},
    {"operator": "Exists"},
    {"operator": "Exists", "effect": "NoSchedule"},
)
CAPACITY_REQUESTS = ("1Gi", "5Gi", "5Gi", "8Gi", "8Gi", "12Gi", "30Gi", "100Gi")
# Requests of cores: milli units (rounded up to the range's step), one past the milli range's precision.
CORE_REQUESTS = ("250m", "300m", "1", "1500m", "2", "150100u", "5")
# Attributes a constraint compares, by kind (every device has a distinct index, so matching it fails for two devices).
CONSTRAINT_ATTRIBUTES = {
    "matchAttribute": ("model", "numa", "numa", "driverVersion", "migCapable", "pcieRoot", "index", "nics"),
    "distinctAttribute": ("index", "index", "model", "numa", "pcieRoot", "driverVersion", "nics", "nics"),
}


def _classes(drivers: list[str], rng: random.Random, bulk: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """The DeviceClasses, and the names the pod's ordinary requests pick from (weighted)."""

    def by_driver(name: str, driver: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}

    big = f'device.capacity["{drivers[0]}"].?memory.orValue(quantity("0")).compareTo(quantity("40Gi")) >= 0'
    classes = [
        {"metadata": {"name": "gpu"}, "spec": {}},
        by_driver("first-driver", drivers[0]),
        {"metadata": {"name": "big"}, "spec": {"selectors": [{"cel": {"expression": big}}]}},
    ]
    # The selector-free class would reach the bulk devices, which only the bulk claim may take.
    names = ([] if bulk else ["gpu", "gpu"]) + ["first-driver", "first-driver", "first-driver", "big"]
    if len(drivers) > 1:
        classes.append(by_driver("second-driver", drivers[1]))
        names.append("second-driver")
    if rng.random() < 0.03:
        classes.append(
            {"metadata": {"name": "broken"}, "spec": {"selectors": [{"cel": {"expression": 'device.attributes["x"].y'}}]}}
        )
        names.append("broken")
    if bulk:
        classes.append(by_driver("bulk", BULK_DRIVER))
    return classes, names


def _body(rng: random.Random, driver: str, classes: list[str], *, sub: bool) -> dict[str, Any]:
    """An ``exactly`` block or a subrequest's fields."""
    cls = rng.choice(classes)
    mode = "All" if rng.random() < (0.05 if sub else 0.08) else "ExactCount"
    r: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        r["count"] = rng.choice((1, 1, 1, 1, 1, 2, 2, 3))
    pool = SAFE_SELECTORS + (DRIVER_SELECTORS if cls in ("first-driver", "big") else ())
    sels = rng.sample(pool, rng.choice((0, 0, 0, 0, 1, 1, 2)) if not sub else rng.choice((0, 0, 1)))
    if rng.random() < 0.03:
        sels.append(rng.choice(ERRORING_SELECTORS))
    if sels:
        r["selectors"] = [{"cel": {"expression": s.format(d=driver)}} for s in sels]
    if rng.random() < 0.35:
        r["tolerations"] = rng.sample(TOLERATIONS, rng.choice((1, 1, 2)))
    if rng.random() < 0.25:
        reqs = {"memory": rng.choice(CAPACITY_REQUESTS)}
        if rng.random() < 0.3:
            reqs["cores"] = rng.choice(CORE_REQUESTS)
        elif rng.random() < 0.1:
            reqs["bandwidth"] = rng.choice(("1", "2"))  # no device has it
        r["capacity"] = {"requests": reqs}
    if not sub and rng.random() < 0.1:
        r["adminAccess"] = True
    if rng.random() < 0.02:  # alpha (1.37): refused while DRADerivedAttributes is off
        r["derivedAttributes"] = [{"name": "derived/numa", "expression": f'device.attributes["{driver}"].?numa.orValue(0)'}]
    return r


def _constraints(rng: random.Random, drivers: list[str], names: list[str]) -> list[dict[str, Any]]:
    out = []
    for _ in range(rng.choice((0, 0, 0, 0, 1, 1, 2))):
        kind = rng.choice(("matchAttribute", "distinctAttribute"))
        name = f"{rng.choice((drivers[0],) * 8 + (drivers[-1],))}/{rng.choice(CONSTRAINT_ATTRIBUTES[kind])}"
        if rng.random() < 0.1:
            name = "resource.kubernetes.io/pcieRoot"  # a standard attribute, outside every driver's domain
        c: dict[str, Any] = {kind: name}
        if rng.random() < 0.6:
            c["requests"] = rng.sample(names, rng.randint(1, min(2, len(names))))
        out.append(c)
    return out


def _claim(draw: Draw[Any], name: str, drivers: list[str], classes: list[str], *, later: bool) -> dict[str, Any]:
    """One of the pod's ordinary claims; a ``later`` one is smaller (the search multiplies the claims' choices)."""
    rng = rng_of(draw)
    requests: list[dict[str, Any]] = []
    names: list[str] = []  # what a constraint may name: requests and request/subrequest
    for i in range(draw(st.sampled_from((1, 1, 2) if later else (1, 1, 2, 2, 3)))):
        rname = f"req-{i}"
        names.append(rname)
        if rng.random() < 0.3:
            subs = []
            for j in range(rng.choice((1, 2, 2, 3))):
                subs.append({"name": f"sub-{j}", **_body(rng, drivers[0], classes, sub=True)})
                names.append(f"{rname}/sub-{j}")
            requests.append({"name": rname, "firstAvailable": subs})
        else:
            requests.append({"name": rname, "exactly": _body(rng, drivers[0], classes, sub=False)})
    devices: dict[str, Any] = {"requests": requests}
    constraints = _constraints(rng, drivers, names)
    if constraints:
        devices["constraints"] = constraints
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": {"devices": devices}}


# Combinations the search may walk for the pod's ordinary claims (the product over requests of
# "count among the devices of its class", summed over subrequests): a case whose later request
# fails walks all of them, which takes the Go allocator seconds and the simulator past its step
# limit. Above this, request counts come down.
SEARCH_BOUND = 100_000


def _tame(claims: list[dict[str, Any]], slices: list[dict[str, Any]], drivers: list[str]) -> None:
    """Bound the claims' search by ``SEARCH_BOUND``: lower the largest counts, then drop the last claim or request."""
    devices = [
        (s["spec"]["driver"], d) for s in slices if s["spec"]["driver"] != BULK_DRIVER for d in s["spec"].get("devices") or []
    ]
    per_class = {
        "gpu": len(devices),
        "first-driver": sum(1 for drv, _ in devices if drv == drivers[0]),
        "second-driver": sum(1 for drv, _ in devices if drv == drivers[-1]),
        "big": sum(1 for drv, d in devices if drv == drivers[0] and d["capacity"]["memory"]["value"] in ("40Gi", "80Gi")),
    }

    def ways(b: dict[str, Any]) -> int:
        return math.comb(per_class.get(b["deviceClassName"], 0), b.get("count", 1)) if "count" in b else 1

    while True:
        bodies = [r.get("firstAvailable") or [r["exactly"]] for c in claims for r in c["spec"]["devices"]["requests"]]
        if math.prod(max(1, sum(ways(b) for b in alts)) for alts in bodies) <= SEARCH_BOUND:
            return
        biggest = max((b for alts in bodies for b in alts if b.get("count", 1) > 1), key=ways, default=None)
        if biggest is not None:
            biggest["count"] -= 1
        elif len(claims) > 1:
            claims.pop()
        elif not _drop_last_request(claims[0]):
            return


def _drop_last_request(claim: dict[str, Any]) -> bool:
    """Remove the claim's last request (and what its constraints say of it); False if it has only one."""
    devices = claim["spec"]["devices"]
    if len(devices["requests"]) < 2:
        return False
    gone = devices["requests"].pop()["name"]
    kept = []
    for c in devices.get("constraints") or []:
        if "requests" in c:
            c["requests"] = [n for n in c["requests"] if n.split("/")[0] != gone]
            if not c["requests"]:
                continue
        kept.append(c)
    if kept:
        devices["constraints"] = kept
    else:
        devices.pop("constraints", None)
    return True


def _bulk(count: int, *, mode: str = "ExactCount", selector: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "bulk", "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if selector is not None:
        body["selectors"] = [{"cel": {"expression": selector}}]
    return body


def _bulk_claim(draw: Draw[Any]) -> dict[str, Any]:
    """The pod's last claim, against the 32-device limit; it always fits the bulk pool's 34+ devices, or is over the limit.

    "skip": a big first choice and a small one beside another request (in either order), so the
    big one goes over the limit (skipped at once) or fits. "all": ``All`` of the low-index devices
    after a big request of the others, which may put the claim over the limit (then the ``All``
    subrequest, or the big one, gives way to a small one). "over": more than 32 at once.
    """
    rng = rng_of(draw)
    shape = rng.choice(("skip", "skip", "all", "all", "over"))
    big = draw(st.sampled_from((16, 20, 24, 28, 30, 31, 32, 33)))
    low_n = rng.choice((8, 10, 12))
    low = f'device.attributes["{BULK_DRIVER}"].index < {low_n}'
    high = f'device.attributes["{BULK_DRIVER}"].index >= {low_n}'
    requests: list[dict[str, Any]]
    first: dict[str, Any]
    rest: dict[str, Any]
    if shape == "skip":
        subs = [{"name": "many", **_bulk(big)}]
        if rng.random() < 0.4:
            subs.append({"name": "some", **_bulk(rng.choice((8, 12)))})
        subs.append({"name": "few", **_bulk(rng.choice((1, 2)))})
        first = {"name": "first", "firstAvailable": subs}
        more = {"name": "more", "exactly": _bulk(rng.choice((1, 2, 4, 10)))}
        requests = [first, more] if rng.random() < 0.6 else [more, first]
    elif shape == "all":
        many = _bulk(min(big, 22), selector=high)  # the bulk pool has at least 22 devices from low_n on
        if rng.random() < 0.5:
            subs = [{"name": "many", **many}, {"name": "few", **_bulk(1, selector=high)}]
            first = {"name": "first", "firstAvailable": subs}
            rest = {"name": "rest", "exactly": _bulk(0, mode="All", selector=low)}
        else:
            first = {"name": "first", "exactly": many}
            rest = {
                "name": "rest",
                "firstAvailable": [
                    {"name": "all", **_bulk(0, mode="All", selector=low)},
                    {"name": "one", **_bulk(1, selector=low)},
                ],
            }
        requests = [first, rest]
    else:
        over = rng.choice((33, 40))
        requests = [{"name": "first", "firstAvailable": [{"name": "many", **_bulk(over)}, {"name": "most", **_bulk(30)}]}]
        requests.append({"name": "more", "exactly": _bulk(over - 30 + rng.randint(0, 4))})
    devices: dict[str, Any] = {"requests": requests}
    if rng.random() < 0.3:
        # Constraints every choice satisfies (a search that failed here would be exponential).
        devices["constraints"] = [
            rng.choice(({"matchAttribute": f"{BULK_DRIVER}/model"}, {"distinctAttribute": f"{BULK_DRIVER}/index"}))
        ]
    return {"metadata": {"name": "bulk-claim", "namespace": "ns", "uid": "uid-bulk-claim"}, "spec": {"devices": devices}}


def _allocated(draw: Draw[Any], slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claims allocated earlier: dedicated, admin access, shared (with consumed capacity or not)."""
    devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d)
        for s in slices
        if s["spec"]["driver"] != BULK_DRIVER
        for d in s["spec"].get("devices") or []
    ]
    n = draw(st.sampled_from((0, 0, 1, 1, 2, 3)))
    if not devices or not n:
        return []
    rng = rng_of(draw)
    out = []
    for i in range(n):
        driver, pool, d = rng.choice(devices)
        result: dict[str, Any] = {"request": "gpu", "driver": driver, "pool": pool, "device": d["name"]}
        request: dict[str, Any] = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}
        if d.get("allowMultipleAllocations"):
            result["shareID"] = f"00000000-0000-4000-8000-00000000000{i}"
            if rng.random() < 0.75:
                result["consumedCapacity"] = {"memory": rng.choice(("4Gi", "8Gi", "10Gi", "16Gi", "40Gi"))}
        elif rng.random() < 0.3:
            result["adminAccess"] = True
            request["adminAccess"] = True
        out.append(
            {
                "metadata": {"name": f"taken-{i}", "namespace": "ns", "uid": f"uid-taken-{i}"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
                "status": {"allocation": {"devices": {"results": [result]}}},
            }
        )
    return out


@st.composite
def allocation_cases(draw: Draw[Any], minor: int = 37) -> dict[str, Any]:
    """One ``allocate`` case for celdiff (and :func:`testkit.oracle.oracle.python_allocate`) of release 1.<minor>.

    (Only 1.37+ knows DRAFractionalCapacityRange; before, every case asks for the default gates.)
    """
    rng = rng_of(draw)
    labels = node_labels(rng)
    drivers = list(DRIVERS[: draw(st.integers(1, 2))])
    pools = [(driver, pi) for driver in drivers for pi in range(draw(st.integers(1, 2)))]
    flawed = rng.randrange(len(pools)) if rng.random() < 0.3 else -1  # one pool incomplete or invalid
    slices: list[dict[str, Any]] = []
    for i, (driver, pi) in enumerate(pools):
        flaw = rng.choice(FLAWS) if i == flawed else None
        lists = 1.0 if minor >= LISTS_CONVERT_SINCE else 0.2
        slices += pool_slices(draw, driver, f"pool-{pi}", f"{DRIVERS.index(driver)}-{pi}", labels, flaw, lists)
    bulk = draw(st.integers(0, 3)) == 0
    if bulk:
        slices += bulk_slices(draw)
    classes, class_names = _classes(drivers, rng, bulk)
    claims = [_claim(draw, f"claim-{i}", drivers, class_names, later=i > 0) for i in range(draw(st.sampled_from((1, 1, 2))))]
    _tame(claims, slices, drivers)
    if bulk:
        claims.append(_bulk_claim(draw))
    allocated = _allocated(draw, slices)
    case = allocate_case(node=NODE, slices=slices, classes=classes, claims=claims, allocated=allocated, node_labels=labels)
    if rng.random() < 0.3 and minor >= FRACTIONAL_GATE_SINCE:
        case["featureGates"] = FRACTIONAL_GATE
    return case
