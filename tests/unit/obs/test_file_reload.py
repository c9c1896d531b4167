"""dra_driver.obs.file_reload: a value re-read when its files change (the metrics auth files, the webhook certificate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.obs.file_reload import Reloaded, stamp_of
from testkit.webhookcerts import make_certs
from webhook import server as webhook_server


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _reloaded(path: Path, clock: Clock, every: list[float], events: list[str]) -> Reloaded[str]:
    def load() -> str:
        text = path.read_text()
        if text == "bad":
            raise ValueError("bad content")
        return text

    return Reloaded(
        lambda: stamp_of([path]),
        load,
        every_s=lambda: every[0],
        clock=clock,
        errors=(OSError, ValueError),
        reloaded=lambda: events.append("reloaded"),
        failed=lambda err: events.append(f"failed: {err}"),
    )


def test_start_up_errors_are_raised(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _reloaded(tmp_path / "absent", Clock(), [1.0], [])
    (tmp_path / "f").write_text("bad")
    with pytest.raises(ValueError, match="bad content"):
        _reloaded(tmp_path / "f", Clock(), [1.0], [])


def test_a_change_is_read_after_the_interval_and_a_bad_one_keeps_the_last_value(tmp_path: Path) -> None:
    path, clock, every = tmp_path / "f", Clock(), [5.0]
    events: list[str] = []
    path.write_text("one")
    value = _reloaded(path, clock, every, events)
    assert value.current() == "one"
    path.write_text("two!")
    clock.now += 4.9
    assert value.current() == "one" and events == []  # not looked at within the interval
    clock.now += 0.1
    assert value.current() == "two!" and events == ["reloaded"]
    path.write_text("bad")
    clock.now += 5.0
    assert value.current() == "two!" and events[-1] == "failed: bad content"
    path.unlink()
    clock.now += 5.0
    assert value.current() == "two!" and events[-1].startswith("failed: ")
    every[0] = 0.0  # the interval is read at each look (tests set the modules' constants to 0)
    path.write_text("three")
    assert value.current() == "three"


def test_the_webhooks_certificate_uses_the_shared_reload(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    tls = webhook_server.TlsFiles(certs.cert, certs.key)
    assert isinstance(tls._context, Reloaded)  # one copy of the reload logic, not its own
    assert tls.context() is tls.context()  # unchanged files: the same context
