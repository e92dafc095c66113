"""Who may ask the query server (issue 16; docs/operations/security.md): a bearer token, the
address the server binds (one rule, :func:`query_address`) and TLS. Unsafe or inconsistent
settings are refused at start-up, naming them (:func:`check_query_settings`).

Membership records are signed with :mod:`streams_runtime.cluster.membership_auth`; what the
server and the membership reader turn away is counted in :mod:`streams_runtime.metrics`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streams_runtime.settings import RuntimeSettings

__all__ = [
    "QueryAddress",
    "check_query_settings",
    "client_ssl_context",
    "is_loopback_host",
    "query_address",
    "query_token",
    "read_secret",
    "server_ssl_context",
    "setting_name",
    "tokens_equal",
]

_ENV = "PROGRESS_CONTROL_RUNTIME_"


def setting_name(name: str) -> str:
    """A runtime setting as error messages name it, with its env variable:
    ``name (env PROGRESS_CONTROL_RUNTIME_<NAME>)``."""
    return f"{name} (env {_ENV}{name.upper()})"


# -- exposure and tokens ----------------------------------------------------------------------


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` only listens on loopback: ``localhost`` or a loopback IP literal.
    Other names are not resolved (a name's addresses can change after start-up): they count as
    exposed, as does ``""`` (every interface)."""
    name = host.strip().removeprefix("[").removesuffix("]").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


@dataclass(frozen=True)
class QueryAddress:
    """Where the query server listens and what it advertises: the one bind-host rule, used by
    the start-up check (:func:`check_query_settings`) and by the app that binds."""

    advertised_host: str
    """The host of ``application_server``, as other instances reach this one."""
    bind_host: str
    """``query_bind_host`` when set, else the advertised host."""
    port: int
    """The port of ``application_server`` (0: any free port)."""


def query_address(settings: RuntimeSettings) -> QueryAddress | None:
    """The query server's address (``None``: no query server)."""
    if settings.application_server is None:
        return None
    host, _, port = settings.application_server.rpartition(":")
    return QueryAddress(host, settings.query_bind_host or host, int(port))


def read_secret(path: Path, setting: str) -> str:
    """The secret in ``path`` (stripped), or ``ValueError`` naming ``setting``."""
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"{setting_name(setting)}: cannot read {path}: {exc}") from exc
    if not value:
        raise ValueError(f"{setting_name(setting)}: {path} is empty")
    return value


def query_token(settings: RuntimeSettings) -> str | None:
    """The bearer token every query must carry (from ``query_token`` or ``query_token_file``)."""
    if settings.query_token is not None:
        return settings.query_token.get_secret_value() or None
    if settings.query_token_file is not None:
        return read_secret(settings.query_token_file, "query_token_file")
    return None


def tokens_equal(given: str, expected: str) -> bool:
    """Constant-time comparison, also of the length (both sides hashed first)."""
    return hmac.compare_digest(
        hashlib.sha256(given.encode()).digest(), hashlib.sha256(expected.encode()).digest()
    )


def server_ssl_context(settings: RuntimeSettings) -> ssl.SSLContext | None:
    """The query server's TLS context (``None``: plain HTTP)."""
    if settings.query_tls_cert_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.query_tls_cert_file, settings.query_tls_key_file)
    return context


def client_ssl_context(settings: RuntimeSettings) -> ssl.SSLContext | None:
    """The context forwarded queries use (``None``: plain HTTP, as the servers are)."""
    if settings.query_tls_cert_file is None:
        return None
    ca = settings.query_tls_ca_file
    context = ssl.create_default_context(cafile=None if ca is None else str(ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def check_query_settings(settings: RuntimeSettings) -> None:
    """Refuse unsafe or inconsistent query settings, naming them (``ValueError``); the
    membership secret is checked by
    :func:`~streams_runtime.cluster.membership_auth.check_membership_settings`."""
    if settings.query_token is not None and settings.query_token_file is not None:
        raise ValueError(
            f"set one of {setting_name('query_token')} and {setting_name('query_token_file')}"
        )
    token = query_token(settings)
    address = query_address(settings)
    host = None if address is None else address.bind_host
    exposed = host is not None and not is_loopback_host(host)
    if exposed and token is None and not settings.query_allow_unauthenticated:
        raise ValueError(
            f"the query server would bind {host!r}, which is not a loopback address, "
            f"without authentication: set {setting_name('query_token')} or query_token_file (every "
            "request must then carry 'Authorization: Bearer <token>'), bind a loopback "
            "address with query_bind_host, or set "
            f"{setting_name('query_allow_unauthenticated')}=true to serve anyone who can connect"
        )
    tls_only = {
        "query_tls_key_file": settings.query_tls_key_file,
        "query_tls_ca_file": settings.query_tls_ca_file,
    }
    if settings.query_tls_cert_file is None:
        given = [name for name, value in tls_only.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need {setting_name('query_tls_cert_file')}")
        return
    try:
        server_ssl_context(settings)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"{setting_name('query_tls_cert_file')} / query_tls_key_file: cannot load the "
            f"certificate and key: {exc}"
        ) from exc
    try:
        client_ssl_context(settings)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"{setting_name('query_tls_ca_file')}: cannot load: {exc}") from exc
