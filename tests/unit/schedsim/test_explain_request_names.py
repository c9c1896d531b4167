"""`dra-gpu explain` refuses a claim that repeats a request name, as the API server does.

The allocator knows a claim's requests by name ("request", or "request/subrequest" for an
alternative of ``firstAvailable``): its selector chains, outcomes and candidates are kept per
(claim, request name). A claim with two requests of one name never reaches the scheduler (the
API server refuses it); read as it is, the second request would be judged by the first one's
selectors (a pod that fits reported as not fitting), so it is an input error instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.schedsim.allocator import InvalidObject, explain

DRIVER = "gpu.dra-gpu.dev"
SLICES = [
    {
        "metadata": {"name": "s"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "n",
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "a", "attributes": {"m": {"string": "x"}}},
                {"name": "b", "attributes": {"m": {"string": "y"}}},
            ],
        },
    }
]
CLASSES = {"gpu": {"metadata": {"name": "gpu"}, "spec": {}}}


def _sub(name: str, value: str) -> dict[str, Any]:
    """A request body (or subrequest) of the class, for devices whose attribute ``m`` is ``value``."""
    sel = {"cel": {"expression": f'device.attributes["{DRIVER}"].m == "{value}"'}}
    return {"name": name, "deviceClassName": "gpu", "selectors": [sel]}


def _exactly(name: str, value: str) -> dict[str, Any]:
    body = _sub(name, value)
    return {"name": body.pop("name"), "exactly": body}


def _claim(requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": requests}}}


def test_requests_of_distinct_names_each_get_their_own_selectors() -> None:
    got = explain([_claim([_exactly("r1", "x"), _exactly("r2", "y")])], SLICES, CLASSES, []).to_json()
    assert {(r["request"], tuple(r["devices"])) for r in got["requests"]} == {("r1", ("n/a",)), ("r2", ("n/b",))}


@pytest.mark.parametrize(
    ("requests", "where"),
    [
        ([_exactly("r", "x"), _exactly("r", "y")], 'requests[1].name: duplicate value "r"'),
        ([{"name": "r", "firstAvailable": [_sub("s", "x"), _sub("s", "y")]}], 'firstAvailable[1].name: duplicate value "r/s"'),
        ([_exactly("r/s", "x"), {"name": "r", "firstAvailable": [_sub("s", "y")]}], 'duplicate value "r/s"'),
        (
            [{"exactly": {"deviceClassName": "gpu"}}, {"exactly": {"deviceClassName": "gpu"}}],
            'requests[1].name: duplicate value ""',
        ),
    ],
)
def test_a_repeated_request_name_is_an_input_error(requests: list[dict[str, Any]], where: str) -> None:
    with pytest.raises(InvalidObject, match="ResourceClaim ns/c: ") as err:
        explain([_claim(requests)], SLICES, CLASSES, [])
    assert where in str(err.value)
