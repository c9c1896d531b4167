"""Seeded mutation fuzzing of the decoders that take outside input (shared by tests/fuzz).

Each fuzz test mutates valid seed documents (JSON-like values) into hostile ones — wrong
types, huge and odd numbers, extreme quantities, long strings, deep nesting, dropped and
duplicated keys — feeds each to a decoder, and asserts two things per input: the decoder
raises nothing but the module's own error types, and it spends less than
``PER_INPUT_LIMIT_S`` of this thread's CPU time (its fastest of up to three runs). The budget scales with
``DRA_GPU_FUZZ_SCALE`` (1 in ``make test``, more in ``make fuzz``); the seed is fixed per
test (``DRA_GPU_FUZZ_SEED`` overrides it) so a failure reproduces. Counts go to
``COUNTS`` and are printed at the end of the run (see ``conftest.py``).
"""

from __future__ import annotations

import copy
import gc
import json
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

PER_INPUT_LIMIT_S = 0.1
SLOW_RETRIES = 2
"""An input over the limit is timed again up to this many times and judged by its fastest run: CPU
time on a shared 2-core machine doubles under load, while a decoder that is slow on an input is
slow on it every time."""
SCALE = float(os.environ.get("DRA_GPU_FUZZ_SCALE", "1"))
COUNTS: dict[str, int] = {}

HOSTILE_SCALARS: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    2**63,
    -(2**63) - 1,
    10**400,
    1.5,
    float("inf"),
    float("nan"),
    -0.0,
    "",
    " ",
    "\n",
    "x" * 5000,
    "0",
    "-1",
    "1e2147483647",
    "1e-2147483648",
    "1e10000000",
    "9" * 4400,
    "1" + "0" * 4400 + "Gi",
    "0." + "0" * 4400 + "1",
    "1E+999999999999999999999",
    "1Ei",
    "8Ei",
    "+1Gi",
    "1.5Gi",
    "1e9",
    "100m",
    "-5Gi",
    "NaN",
    "1Ki\n",
    "١٢٣",
    "1Gi ",
    "0x10",
    "1_000",
    "\u0000",
    "../../etc",
    "a" * 64,
    "A-B",
    "gpu-0",
    [],
    {},
    [None],
    {"": None},
)
QUANTITY_SHAPES: tuple[str, ...] = (
    "{d}",
    "{d}Gi",
    "{d}.{d}Mi",
    "{d}e{e}",
    "{d}E{e}",
    "-{d}Ki",
    "+{d}k",
    "{d}n",
    "{d}m",
    ".{d}",
    "{d}.",
    "{d}e+{e}",
    "{d}e-{e}",
    "{d}Ei",
    "0{d}G",
)


def random_quantity(rng: random.Random) -> str:
    """A quantity-like string: valid, absurd, or almost valid."""
    shape = rng.choice(QUANTITY_SHAPES)
    digits = str(rng.choice([0, 1, 7, 10 ** rng.randint(1, 30), rng.randint(0, 10 ** rng.randint(1, 6))]))
    exp = str(rng.choice([0, 1, 3, 18, 19, 308, 400, 2**31 - 1, 2**31, 2**63, rng.randint(0, 10**12)]))
    if rng.random() < 0.05:
        return "9" * rng.choice([19, 20, 300, 4300, 4301, 9000])
    return shape.format(d=digits, e=exp)


def nest(value: Any, depth: int, rng: random.Random) -> Any:
    """``value`` wrapped in ``depth`` lists or objects."""
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"a": value}
    return value


def _paths(doc: Any, max_depth: int = 40) -> Iterator[tuple[Any, ...]]:
    """Every path into ``doc`` (iteratively; deep nesting made by ``nest`` is not descended)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(doc, ())]
    while stack:
        node, prefix = stack.pop()
        yield prefix
        if len(prefix) >= max_depth:
            continue
        if isinstance(node, dict):
            stack.extend((v, (*prefix, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*prefix, i)) for i, v in enumerate(node))


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


def mutate(seed: Any, rng: random.Random, extra: Sequence[Callable[[random.Random], Any]] = ()) -> Any:
    """One hostile variant of ``seed`` (1 to 3 mutations at random places)."""
    doc = copy.deepcopy(seed)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(doc))
        path = rng.choice(paths)
        target = _get(doc, path)
        r = rng.random()
        if r < 0.30:
            doc = _set(doc, path, copy.deepcopy(rng.choice(HOSTILE_SCALARS)))
        elif r < 0.50:
            doc = _set(doc, path, random_quantity(rng))
        elif r < 0.58:
            doc = _set(doc, path, nest(target, rng.choice([2, 50, 1000, 5000, 100_000]), rng))
            break  # deep values are not walked again
        elif r < 0.68 and isinstance(target, dict) and target:
            del target[rng.choice(list(target))]
        elif r < 0.76 and isinstance(target, dict):
            target[rng.choice(["unknown", "", "x" * 300, *list(target)[:3]])] = copy.deepcopy(rng.choice(HOSTILE_SCALARS))
        elif r < 0.82 and isinstance(target, list):
            small = len(target) < 4 and all(
                x is None or isinstance(x, int | float | bool) or (isinstance(x, str) and len(x) < 100) for x in target
            )  # shared copies of big values would serialize to gigabytes
            target.extend(copy.deepcopy(target) * (rng.choice([1, 5, 100]) if small else 1))
        elif r < 0.88 and isinstance(target, str):
            doc = _set(doc, path, target * min(rng.choice([2, 100, 3000]), 1 + 100_000 // max(1, len(target))))
        elif extra:
            doc = _set(doc, path, rng.choice(extra)(rng))
        else:
            doc = _set(doc, path, copy.deepcopy(rng.choice(HOSTILE_SCALARS)))
    return doc


def to_bytes(doc: Any, rng: random.Random) -> bytes:
    """JSON bytes of ``doc``, sometimes cut short or with bytes flipped; never raises."""
    try:
        raw = json.dumps(doc, allow_nan=rng.random() < 0.5).encode()
    except (ValueError, RecursionError):
        raw = b"[" * 100_000
    r = rng.random()
    if r < 0.05 and raw:
        return raw[: rng.randrange(len(raw))]
    if r < 0.10 and raw:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    return raw


@dataclass
class FuzzReport:
    """What one fuzz run saw."""

    name: str
    inputs: int = 0
    rejected: int = 0
    accepted: int = 0
    slowest_s: float = 0.0
    failures: list[str] = field(default_factory=list)


def budget(base: int) -> int:
    """The number of inputs for a test whose CI budget is ``base``."""
    return max(1, int(base * SCALE))


def seed_for(name: str) -> int:
    """The RNG seed of a fuzz test (``DRA_GPU_FUZZ_SEED`` overrides it)."""
    env = os.environ.get("DRA_GPU_FUZZ_SEED")
    return int(env) if env else sum(name.encode()) * 7919


def run(
    name: str,
    inputs: Iterator[Any],
    target: Callable[[Any], object],
    allowed: tuple[type[BaseException], ...],
) -> FuzzReport:
    """Feed every input to ``target``; collect anything other than ``allowed`` errors or a slow input."""
    rep = FuzzReport(name)
    for value in inputs:
        rep.inputs += 1
        spent = _timed_call(rep, target, value, allowed)
        for _ in range(SLOW_RETRIES):  # a busy machine's noise, or an input that is slow every time?
            if spent <= PER_INPUT_LIMIT_S:
                break
            spent = min(spent, _cpu_of(target, value))
        rep.slowest_s = max(rep.slowest_s, spent)
        if spent > PER_INPUT_LIMIT_S and len(rep.failures) < 10:
            rep.failures.append(f"took {spent * 1000:.0f} ms of CPU on input {_short(value)}")
    COUNTS[name] = COUNTS.get(name, 0) + rep.inputs
    return rep


def _timed_call(rep: FuzzReport, target: Callable[[Any], object], value: Any, allowed: tuple[type[BaseException], ...]) -> float:
    """Feed one input, count its outcome in ``rep``; this thread's CPU seconds it took."""
    gc.disable()  # time the decoder, not a collection of the harness's own garbage
    t0 = time.thread_time()
    try:
        target(value)
        rep.accepted += 1
    except allowed:
        rep.rejected += 1
    except BaseException as err:  # the point is to catch everything else
        if len(rep.failures) < 5:
            rep.failures.append(f"{type(err).__name__}: {str(err)[:200]} on input {_short(value)}")
        else:
            rep.failures.append("")
    finally:
        spent = time.thread_time() - t0
        gc.enable()
    return spent


def _cpu_of(target: Callable[[Any], object], value: Any) -> float:
    """The CPU seconds of one more call with the same input (its outcome was counted already)."""
    gc.disable()
    t0 = time.thread_time()
    try:
        target(value)
    except BaseException:  # counted by the first call; only the time matters here
        pass
    finally:
        spent = time.thread_time() - t0
        gc.enable()
    return spent


def assert_clean(rep: FuzzReport) -> None:
    """Fail with the first few offending inputs."""
    bad = [f for f in rep.failures if f]
    assert not rep.failures, f"{rep.name}: {len(rep.failures)} bad of {rep.inputs} inputs:\n" + "\n".join(bad)


def _short(value: Any) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    except (ValueError, RecursionError, TypeError):
        text = repr(type(value))
    return text if len(text) < 300 else text[:150] + f"...({len(text)} chars)..." + text[-100:]
