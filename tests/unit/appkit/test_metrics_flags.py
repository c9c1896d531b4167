"""The metrics flags of the three daemons: where /metrics listens by default, who may scrape, tenant labels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest

from controller.main import parse as parse_controller
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS, is_every_address
from dra_driver.obs.scrape_auth import ScrapeAuthConfig
from kubelet_plugin.settings import parse as parse_plugin
from webhook.main import parse as parse_webhook

TLS = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]
ENV = (
    "METRICS_PORT",
    "METRICS_ADDRESS",
    "METRICS_TOKEN_FILE",
    "METRICS_TLS_CERT_FILE",
    "METRICS_TLS_KEY_FILE",
    "METRICS_CLIENT_CA_FILE",
    "METRICS_TENANT_LABELS",
)


class MetricsSettings(Protocol):
    """What the three daemons' settings share about metrics."""

    @property
    def metrics_address(self) -> str: ...

    @property
    def metrics_auth(self) -> ScrapeAuthConfig: ...


Parse = Callable[[list[str]], MetricsSettings]
DAEMONS: dict[str, Parse] = {
    "plugin": parse_plugin,
    "controller": parse_controller,
    "webhook": lambda argv: parse_webhook([*TLS, *argv]),
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NODE_NAME", "node-a")


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_by_default_metrics_listen_on_loopback_never_every_address_and_need_nothing(daemon: str) -> None:
    settings = DAEMONS[daemon]([])
    address = settings.metrics_address
    assert "127.0.0.1" == address == DEFAULT_METRICS_ADDRESS
    assert not is_every_address(address)
    assert ScrapeAuthConfig() == settings.metrics_auth


@pytest.mark.parametrize("address", ["::", "[::]", "0.0.0.0", "", " :: "])
def test_every_address_is_recognised_in_each_spelling(address: str) -> None:
    assert is_every_address(address)


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.7", "fd00::7", "[fd00::7]", "::1", "localhost"])
def test_one_address_is_not_every_address(address: str) -> None:
    assert not is_every_address(address)


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_the_auth_flags_and_their_env_vars_reach_the_settings(daemon: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRICS_ADDRESS", "10.1.2.3")
    monkeypatch.setenv("METRICS_TOKEN_FILE", "/etc/dra-gpu/metrics-token/token")
    settings = DAEMONS[daemon](["--metrics-tls-cert-file", "/t/tls.crt", "--metrics-tls-key-file", "/t/tls.key"])
    assert "10.1.2.3" == settings.metrics_address
    assert (
        ScrapeAuthConfig(
            token_file=Path("/etc/dra-gpu/metrics-token/token"),
            tls_cert_file=Path("/t/tls.crt"),
            tls_key_file=Path("/t/tls.key"),
        )
        == settings.metrics_auth
    )
    mtls = DAEMONS[daemon](["--metrics-tls-cert-file", "c", "--metrics-tls-key-file", "k", "--metrics-client-ca-file", "ca"])
    assert Path("ca") == mtls.metrics_auth.client_ca_file


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
@pytest.mark.parametrize(
    ("argv", "mentions"),
    [
        (["--metrics-tls-cert-file", "c"], "go together"),
        (["--metrics-tls-key-file", "k"], "go together"),
        (["--metrics-client-ca-file", "ca"], "--metrics-client-ca-file needs"),
    ],
)
def test_auth_flags_that_do_not_go_together_are_a_usage_error(
    daemon: str, argv: list[str], mentions: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        DAEMONS[daemon](argv)
    assert 2 == exc.value.code
    assert mentions in capsys.readouterr().err


def test_the_plugins_tenant_labels_are_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_plugin([]).metrics_tenant_labels is False
    assert parse_plugin(["--metrics-tenant-labels", "true"]).metrics_tenant_labels is True
    monkeypatch.setenv("METRICS_TENANT_LABELS", "true")
    assert parse_plugin([]).metrics_tenant_labels is True
    with pytest.raises(SystemExit):
        parse_plugin(["--metrics-tenant-labels", "yes"])


def _run_daemon(daemon: str, tmp_path: Path, token: Path) -> int:
    """Parse ``daemon``'s flags with ``--metrics-token-file token`` and run it (it must refuse before serving)."""
    import threading

    from controller.main import run as run_controller
    from kubelet_plugin.main import run as run_plugin
    from testkit.webhookcerts import make_certs
    from webhook.main import parse as parse_webhook_settings
    from webhook.main import serve as serve_webhook

    argv = ["--metrics-port", "0", "--metrics-token-file", str(token)]
    stop = threading.Event()
    stop.set()  # a daemon that got past its checks ends at once
    if daemon == "plugin":
        (tmp_path / "boot_id").write_text("b0\n")
        return run_plugin(parse_plugin([*argv, "--boot-id-file", str(tmp_path / "boot_id")]), stop)
    if daemon == "controller":
        return run_controller(parse_controller(argv), stop)
    certs = make_certs(tmp_path / "tls")
    return serve_webhook(
        parse_webhook_settings(["--tls-cert-file", str(certs.cert), "--tls-private-key-file", str(certs.key), *argv]), stop
    )


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
@pytest.mark.parametrize("broken", ["missing", "dangling-link", "directory"])
def test_a_missing_or_unreadable_token_file_exits_2_naming_the_flag_and_path(daemon: str, broken: str, tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    token = tmp_path / "token"
    if broken == "dangling-link":
        token.symlink_to(tmp_path / "gone")
    elif broken == "directory":
        token.mkdir()
    with capture_logs() as logs:
        assert _run_daemon(daemon, tmp_path, token) == 2
    [event] = [e for e in logs if e.get("event") == "metrics_auth_unusable"]
    assert "--metrics-token-file" in event["error"] and str(token) in event["error"] and "cannot read" in event["error"]
