"""The webhook's memory bounds: the parse cost estimate, the body limit, the largest legitimate review, the fd limit.

``review_cost`` must be an upper bound of what ``json.loads`` allocates (tracemalloc's peak, plus
the body) for every shape, hostile or real, or the parse budget would not bound memory; and the
largest review the API server can send must fit both the body limit and the budget. The
daemons' start raises the soft open-files limit to the hard one.
"""

from __future__ import annotations

import copy
import http.client
import json
import resource
import ssl
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.appkit.daemon import raise_open_files_limit
from testkit.admission import DRIVER, GOOD, body, claim_obj, request
from testkit.webhookcerts import Certs, make_certs
from webhook.admission import VALIDATE_PATH, review
from webhook.main import main, parse
from webhook.server import MAX_BODY_BYTES, PARSE_BUDGET_BYTES, REVIEW_LIMITS, TlsFiles, WebhookServer, review_cost


def _repeat(unit: str, size: int) -> bytes:
    return ("[" + unit * (size // len(unit) - 1) + unit.rstrip(",") + "]").encode()


def _unique_keys(size: int) -> bytes:
    parts, n, total = [], 0, 0
    while total < size:
        part = f'"k{n}":{n},'
        parts.append(part)
        total, n = total + len(part), n + 1
    return ("{" + "".join(parts).rstrip(",") + "}").encode()


HOSTILE = {
    "empty-objects": _repeat("{},", 1 << 20),
    "empty-lists": _repeat("[],", 1 << 20),
    "floats": _repeat("1.5,", 1 << 20),
    "one-key-objects": _repeat('{"":0},', 1 << 20),
    "nested-lists": _repeat("[" * 900 + "]" * 900 + ",", 1 << 20),
    "nested-objects": _repeat('{"":' * 900 + "0" + "}" * 900 + ",", 1 << 20),
    "short-strings": _repeat('"ab",', 1 << 20),
    "small-ints": _repeat("0,", 1 << 20),
    "pairs": _repeat('{"a":"b","c":"d"},', 1 << 20),
    "escapes": _repeat('"\\u00e9\\u00e9",', 1 << 20),
    "literals": _repeat("null,", 1 << 20),
    "unique-keys": _unique_keys(1 << 20),
}


def parse_peak(raw: bytes) -> int:
    """The most memory parsing ``raw`` holds at once: the body plus json.loads's peak allocations."""
    tracemalloc.start()
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak + len(raw)


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_the_cost_estimate_bounds_what_parsing_a_hostile_body_takes(shape: str) -> None:
    raw = HOSTILE[shape]
    assert review_cost(raw) >= parse_peak(raw)


def largest_claim_update() -> bytes:
    """An UPDATE of a claim as large as etcd stores (about 1.5 MiB, its CEL selectors most of it), old and new."""
    selector = (
        'device.attributes["gpu.dra-gpu.dev"].productName == "NVIDIA H100 80GB HBM3" && '
        'device.capacity["gpu.dra-gpu.dev"].memory.compareTo(quantity("40Gi")) >= 0 && '
    ) * 60 + "true"  # about 10 KiB, the API server's limit per expression
    requests = [
        {
            "name": f"r{i}",
            "exactly": {"deviceClassName": "gpu.dra-gpu.dev", "selectors": [{"cel": {"expression": selector}}] * 5},
        }
        for i in range(32)
    ]
    obj = claim_obj(*([GOOD] * 32))
    obj["spec"]["devices"]["requests"] = requests
    obj["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:devices": {".": {}}}}}] * 50
    old = copy.deepcopy(obj)
    obj["metadata"]["labels"] = {"changed": "yes"}
    return body(request(obj, operation="UPDATE", old=old))


def test_the_largest_legitimate_review_fits_the_body_limit_and_a_fraction_of_the_parse_budget() -> None:
    raw = largest_claim_update()
    assert 3 << 20 < len(raw) <= MAX_BODY_BYTES
    assert parse_peak(raw) <= review_cost(raw) <= PARSE_BUDGET_BYTES // 4
    assert review(raw, DRIVER).allowed
    real = body(request(claim_obj(GOOD)))
    assert review_cost(real) < 40 * len(real)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def server(certs: Certs) -> Iterator[WebhookServer]:
    srv = WebhookServer(("127.0.0.1", 0), tls=TlsFiles(certs.cert, certs.key), driver=DRIVER)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    thread.join()


def post(srv: WebhookServer, ca: Path, raw: bytes) -> tuple[int, bytes]:

    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ssl.create_default_context(cafile=str(ca)), timeout=30)
    try:
        conn.request("POST", VALIDATE_PATH, body=raw, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_body_costing_more_than_the_budget_is_refused_unparsed_and_the_largest_real_one_answered(
    server: WebhookServer, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[int] = []
    real_review = review

    def counting(raw: bytes, driver: str) -> Any:
        parsed.append(len(raw))
        return real_review(raw, driver)

    monkeypatch.setattr("webhook.server.review", counting)
    hostile = _repeat("[" * 900 + "]" * 900 + ",", MAX_BODY_BYTES - 16)
    status, answer = post(server, certs.ca, hostile)
    assert 413 == status and b"budget" in answer
    assert [] == parsed
    status, answer = post(server, certs.ca, largest_claim_update())
    assert 200 == status and json.loads(answer)["response"]["allowed"]


def test_the_connection_and_deadline_flags_default_to_the_limits_and_take_env(monkeypatch: pytest.MonkeyPatch) -> None:
    tls = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]
    for var in ("MAX_CONNECTIONS", "REQUEST_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    default = parse(tls)
    assert (REVIEW_LIMITS.max_connections, REVIEW_LIMITS.request_timeout_s) == (
        default.max_connections,
        default.request_timeout_s,
    )
    monkeypatch.setenv("MAX_CONNECTIONS", "16")
    monkeypatch.setenv("REQUEST_TIMEOUT", "2.5")
    assert (16, 2.5) == (parse(tls).max_connections, parse(tls).request_timeout_s)
    for bad in (["--max-connections", "0"], ["--max-connections", "many"], ["--request-timeout", "0"]):
        assert 2 == main([*tls, *bad])


def test_the_daemon_start_raises_the_soft_open_files_limit_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard > 512:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    try:
        assert hard == raise_open_files_limit()
        assert (hard, hard) == resource.getrlimit(resource.RLIMIT_NOFILE)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
