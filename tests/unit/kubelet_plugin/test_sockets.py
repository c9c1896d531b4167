"""Socket naming for the kubelet, including per-pod names for rolling updates."""

from __future__ import annotations

from pathlib import Path

from kubelet_plugin.sockets import MAX_UNIX_PATH, SocketPaths, live_registrations

DRIVER = "gpu.dra-gpu.dev"


def test_default_socket_paths_follow_the_kubelet_convention() -> None:
    """<registrar>/<driver>-reg.sock and <plugin dir>/dra.sock."""
    p = SocketPaths.for_plugin(driver="gpu.dra-gpu.dev", registrar_dir=Path("/r"), plugin_dir=Path("/p"), pod_uid=None)
    assert (Path("/r/gpu.dra-gpu.dev-reg.sock"), Path("/p/dra.sock")) == (p.registration, p.dra)


def test_pod_uid_gives_each_pod_its_own_sockets() -> None:
    """Two plugin pods overlapping in a rolling update never share a socket."""
    a = SocketPaths.for_plugin(driver="d.io", registrar_dir=Path("/r"), plugin_dir=Path("/p"), pod_uid="uid-a")
    b = SocketPaths.for_plugin(driver="d.io", registrar_dir=Path("/r"), plugin_dir=Path("/p"), pod_uid="uid-b")
    assert (Path("/r/d.io-uid-a-reg.sock"), Path("/p/dra-uid-a.sock")) == (a.registration, a.dra)
    assert a.registration != b.registration and a.dra != b.dra


def test_overlong_paths_fall_back_to_a_hash_that_fits() -> None:
    """AF_UNIX paths are limited to 107 bytes; long names are hashed, still distinct per pod."""
    deep = Path("/var/lib/kubelet/plugins_registry/" + "x" * 40)
    a = SocketPaths.for_plugin(
        driver="gpu.dra-gpu.dev", registrar_dir=deep, plugin_dir=deep, pod_uid="6f1c3c9e-0000-4000-8000-000000000001"
    )
    b = SocketPaths.for_plugin(
        driver="gpu.dra-gpu.dev", registrar_dir=deep, plugin_dir=deep, pod_uid="6f1c3c9e-0000-4000-8000-000000000002"
    )
    assert len(str(a.registration)) <= MAX_UNIX_PATH and len(str(a.dra)) <= MAX_UNIX_PATH
    assert a.registration.name.endswith("-reg.sock")
    assert a.registration != b.registration


def test_only_other_pods_registration_sockets_that_accept_a_connection_count_as_live(tmp_path: Path) -> None:
    """A rolling update's old pod listens; a socket a killed plugin left behind (a reboot) refuses and does not count."""
    import socket

    registry = tmp_path / "registry"
    registry.mkdir()
    own = registry / f"{DRIVER}-new-reg.sock"
    listening: list[socket.socket] = []
    for path in (registry / f"{DRIVER}-old-reg.sock", own, registry / "other.dev-x-reg.sock"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.listen(1)
        listening.append(s)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(registry / f"{DRIVER}-killed-reg.sock"))  # the file stays once closed; nothing listens
    try:
        assert [registry / f"{DRIVER}-old-reg.sock"] == live_registrations(registry, DRIVER, own)
        assert [] == live_registrations(tmp_path / "missing", DRIVER, own)
    finally:
        for s in listening:
            s.close()
