"""Free ports for the embedded broker's listeners, and whether a listener is up."""

from __future__ import annotations

import logging
import socket

__all__ = ["accepts_connections", "can_bind", "free_port"]

logger = logging.getLogger(__name__)


def free_port(
    host: str, preferred: int, avoid: set[int] | None = None, *, quiet: bool = False
) -> int:
    """``preferred`` when it is free, else a free port chosen by the kernel (with a warning
    unless ``quiet``: a previous run's port being taken is not worth one)."""
    avoid = avoid or set()
    if preferred and preferred not in avoid and can_bind(host, preferred):
        return preferred
    if preferred and not quiet:
        logger.warning(
            "port %(port)s on %(host)s is in use; picking another",
            {"port": preferred, "host": host},
        )
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


def can_bind(host: str, port: int) -> bool:
    """Whether a listener can bind ``port`` now. With ``SO_REUSEADDR``, as the JVM's server
    sockets bind: a port left in TIME_WAIT by a stopped broker is free to it, and taking it
    again keeps the address clients were given."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def accepts_connections(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
