"""The embedded broker's port check: a port a stopped broker left in TIME_WAIT is free again."""

from __future__ import annotations

import socket

from progress_control_apps.dev.ports import can_bind, free_port


def _leave_in_time_wait(host: str) -> int:
    """A port whose listener accepted a connection and closed it first, as a stopped broker
    does: the accepted side lingers in TIME_WAIT on the listener's port. The listener sets
    ``SO_REUSEADDR`` as the JVM's do (Linux lets a bind pass TIME_WAIT only when both did)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen()
        port = int(listener.getsockname()[1])
        client = socket.create_connection((host, port))
        accepted, _ = listener.accept()
        accepted.close()  # the server closes first: its side goes to TIME_WAIT
        client.close()
    return port


def test_a_port_in_time_wait_is_kept() -> None:
    port = _leave_in_time_wait("127.0.0.1")
    assert can_bind("127.0.0.1", port)
    assert free_port("127.0.0.1", port) == port


def test_a_port_with_a_listener_is_not() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = int(listener.getsockname()[1])
        assert not can_bind("127.0.0.1", port)
        assert free_port("127.0.0.1", port, quiet=True) != port
