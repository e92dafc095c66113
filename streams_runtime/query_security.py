"""Who may ask the query server, and whose membership records are believed (issue 16, DESIGN §5).

Safe by default:

- **Exposure.** A query server bound to anything but a loopback address (``127.0.0.0/8``,
  ``::1``, ``localhost``) requires a bearer token (``query_token`` or ``query_token_file``);
  without one the settings are refused at start-up, naming the settings, unless
  ``query_allow_unauthenticated`` says so explicitly. Tokens are compared in constant time.
- **TLS** (optional): ``query_tls_cert_file`` (and ``query_tls_key_file`` unless the key is in the
  same PEM) serve HTTPS; queries forwarded to other instances then use HTTPS too, verified
  against ``query_tls_ca_file`` (default: the system's CAs) with hostname checking, so an
  advertised endpoint must match its certificate.
- **Membership records are authenticated.** Each record in ``<application_id>-membership``
  carries an HMAC-SHA256 in its ``pc-membership-mac`` header over the topic, the key (instance
  id) and the whole value (the JSON, heartbeat included); a tombstone's covers the time of the
  leave (``pc-membership-left-ms``) instead. The key is ``membership_secret`` (or
  ``membership_secret_file``); without one it is derived from the query token (every instance
  shares that already), so anyone holding the token can write membership records: set a
  separate ``membership_secret`` where query clients are less trusted than the instances.
  Records that do not verify are ignored and counted; an instance forwards queries (and its
  token) only to members whose records verified. A replayed valid record is harmless: one
  older than the liveness window is not live, and the view never takes a record older than the
  one it holds for that instance. With neither a secret nor a token (loopback only, or opted
  out) records are unsigned and believed, as before: a warning says so at start-up.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import ssl
import struct
import threading
import weakref
from collections import Counter as CounterDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge

if TYPE_CHECKING:
    from streams_runtime.metrics import RuntimeMetrics
    from streams_runtime.settings import RuntimeSettings

__all__ = [
    "LEFT_MS_HEADER",
    "MAC_HEADER",
    "MembershipAuthenticator",
    "SecurityMetrics",
    "check_query_settings",
    "client_ssl_context",
    "is_loopback_host",
    "membership_key",
    "query_bind_host",
    "query_token",
    "security_metrics",
    "server_ssl_context",
    "tokens_equal",
]

logger = logging.getLogger(__name__)

MAC_HEADER = "pc-membership-mac"
LEFT_MS_HEADER = "pc-membership-left-ms"
_MAC_DOMAIN = b"progress-control/membership/v1\x00"
_DERIVE_DOMAIN = b"progress-control/membership-key-from-query-token/v1"
MIN_SECRET_BYTES = 16
_MAX_LOGGED = 1000  # forged records may carry endless keys: log the first of this many

_ENV = "PROGRESS_CONTROL_RUNTIME_"


def _env(name: str) -> str:
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


def query_bind_host(settings: RuntimeSettings) -> str | None:
    """The address the query server binds (``None``: no query server)."""
    if settings.application_server is None:
        return None
    return settings.query_bind_host or settings.application_server.rpartition(":")[0]


def _read_secret(path: Path, setting: str) -> str:
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"{_env(setting)}: cannot read {path}: {exc}") from exc
    if not value:
        raise ValueError(f"{_env(setting)}: {path} is empty")
    return value


def query_token(settings: RuntimeSettings) -> str | None:
    """The bearer token every query must carry (from ``query_token`` or ``query_token_file``)."""
    if settings.query_token is not None:
        return settings.query_token.get_secret_value() or None
    if settings.query_token_file is not None:
        return _read_secret(settings.query_token_file, "query_token_file")
    return None


def tokens_equal(given: str, expected: str) -> bool:
    """Constant-time comparison, also of the length (both sides hashed first)."""
    return hmac.compare_digest(
        hashlib.sha256(given.encode()).digest(), hashlib.sha256(expected.encode()).digest()
    )


def membership_key(settings: RuntimeSettings) -> bytes | None:
    """The HMAC key of membership records: ``membership_secret`` (or its file), else derived
    from the query token, else ``None`` (records unsigned)."""
    secret: str | None = None
    if settings.membership_secret is not None:
        secret = settings.membership_secret.get_secret_value()
    elif settings.membership_secret_file is not None:
        secret = _read_secret(settings.membership_secret_file, "membership_secret_file")
    if secret is not None:
        return secret.encode("utf-8")
    token = query_token(settings)
    if token is None:
        return None
    # Domain-separated: the MAC key is not the token itself.
    return hmac.new(token.encode("utf-8"), _DERIVE_DOMAIN, hashlib.sha256).digest()


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
    """Refuse unsafe or inconsistent query settings, naming them (``ValueError``)."""
    if settings.query_token is not None and settings.query_token_file is not None:
        raise ValueError(f"set one of {_env('query_token')} and {_env('query_token_file')}")
    if settings.membership_secret is not None and settings.membership_secret_file is not None:
        raise ValueError(
            f"set one of {_env('membership_secret')} and {_env('membership_secret_file')}"
        )
    token = query_token(settings)
    secret = membership_key(settings)
    has_own_secret = (
        settings.membership_secret is not None or settings.membership_secret_file is not None
    )
    if has_own_secret and secret is not None and len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"{_env('membership_secret')} must be at least {MIN_SECRET_BYTES} bytes")
    host = query_bind_host(settings)
    exposed = host is not None and not is_loopback_host(host)
    if exposed and token is None and not settings.query_allow_unauthenticated:
        raise ValueError(
            f"the query server would bind {host!r}, which is not a loopback address, "
            f"without authentication: set {_env('query_token')} or query_token_file (every "
            "request must then carry 'Authorization: Bearer <token>'), bind a loopback "
            "address with query_bind_host, or set "
            f"{_env('query_allow_unauthenticated')}=true to serve anyone who can connect"
        )
    tls_only = {
        "query_tls_key_file": settings.query_tls_key_file,
        "query_tls_ca_file": settings.query_tls_ca_file,
    }
    if settings.query_tls_cert_file is None:
        given = [name for name, value in tls_only.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need {_env('query_tls_cert_file')}")
        return
    try:
        server_ssl_context(settings)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"{_env('query_tls_cert_file')} / query_tls_key_file: cannot load the certificate "
            f"and key: {exc}"
        ) from exc
    try:
        client_ssl_context(settings)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"{_env('query_tls_ca_file')}: cannot load: {exc}") from exc


# -- membership records -----------------------------------------------------------------------


def _length_prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


Headers = list[tuple[str, str | bytes | None]]
"""Kafka record headers as confluent-kafka takes and gives them."""


def _header(
    headers: Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None,
    name: str,
) -> bytes | None:
    items = headers.items() if isinstance(headers, Mapping) else headers or ()
    found = [v for k, v in items if k == name]
    if len(found) != 1 or found[0] is None:
        return None  # absent, or repeated (ambiguous: never guess which one was signed)
    value = found[0]
    return value.encode() if isinstance(value, str) else value


@dataclass(frozen=True)
class MembershipVerdict:
    """The result of checking one membership record: ``reason`` is ``None`` when it verified
    (or records are unsigned), else why it is ignored; ``left_ms`` is a tombstone's time."""

    reason: str | None
    left_ms: int | None = None


class MembershipAuthenticator:
    """Signs and verifies membership records with one shared key (see the module docstring)."""

    def __init__(self, key: bytes, topic: str) -> None:
        self._key = key
        self._topic = topic.encode("utf-8")

    def _mac(self, key: bytes, value: bytes | None, left_ms: int | None) -> bytes:
        if value is not None:
            body = b"\x01" + _length_prefixed(value)
        else:
            body = b"\x00" + struct.pack(">q", left_ms if left_ms is not None else -1)
        payload = _MAC_DOMAIN + _length_prefixed(self._topic) + _length_prefixed(key) + body
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def headers(self, key: bytes, value: bytes | None, left_ms: int | None = None) -> Headers:
        """Headers that authenticate a record (``value=None``: a tombstone at ``left_ms``)."""
        out: Headers = [(MAC_HEADER, self._mac(key, value, left_ms).hex().encode())]
        if value is None:
            out.append((LEFT_MS_HEADER, str(left_ms).encode()))
        return out

    def verify(
        self,
        key: bytes,
        value: bytes | None,
        headers: Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None,
    ) -> MembershipVerdict:
        """Whether a record read from the membership topic was signed with the shared key."""
        mac_hex = _header(headers, MAC_HEADER)
        if mac_hex is None:
            return MembershipVerdict("unsigned")
        try:
            mac = bytes.fromhex(mac_hex.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return MembershipVerdict("bad-signature")
        left_ms: int | None = None
        if value is None:
            raw = _header(headers, LEFT_MS_HEADER)
            try:
                left_ms = int(raw.decode("ascii")) if raw is not None else None
            except (UnicodeDecodeError, ValueError):
                left_ms = None
            if left_ms is None:
                return MembershipVerdict("bad-signature")
        if not hmac.compare_digest(mac, self._mac(key, value, left_ms)):
            return MembershipVerdict("bad-signature")
        return MembershipVerdict(None, left_ms)


# -- metrics ----------------------------------------------------------------------------------


class SecurityMetrics:
    """Counters of what the query server and the membership reader turned away."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        r = metrics.registry
        self.membership_rejected = Counter(
            "streams_membership_records_rejected",
            "Membership records ignored, by reason (unsigned, bad-signature, key-mismatch,"
            " malformed, replayed: older than the record held for that instance).",
            ["reason"],
            registry=r,
        ).labels
        self.connections_closed = Counter(
            "streams_query_connections_closed",
            "Query server connections closed by the server before a request was answered, by"
            " reason (timeout: no complete request in query_request_timeout_ms; evicted: the"
            " oldest idle connection, to make room at query_max_connections; refused: at the"
            " cap with every connection busy; too-large: request header over the limit;"
            " tls: handshake failed).",
            ["reason"],
            registry=r,
        ).labels
        self.unauthorized = Counter(
            "streams_query_unauthorized",
            "Query requests refused with 401 (missing or wrong bearer token).",
            registry=r,
        )
        self.open_connections = Gauge(
            "streams_query_connections", "Open query server connections.", registry=r
        )
        self._lock = threading.Lock()
        self._logged: set[tuple[str, str]] = set()
        self._rejections: CounterDict[str] = CounterDict()

    def reject_membership(self, instance: str, reason: str, detail: str = "") -> None:
        """Count an ignored membership record; log it once per claimed instance and reason."""
        self.membership_rejected(reason).inc()
        with self._lock:
            self._rejections[reason] += 1
            first = len(self._logged) < _MAX_LOGGED and (instance, reason) not in self._logged
            if first:
                self._logged.add((instance, reason))
        if first:
            logger.warning(
                "ignoring membership record claiming instance %(instance)r: %(reason)s"
                + (" (%(detail)s)" if detail else "")
                + " (logged once)",
                {"instance": instance[:100], "reason": reason, "detail": detail},
            )

    @property
    def membership_rejections(self) -> Mapping[str, int]:
        """Ignored membership records so far, per reason."""
        with self._lock:
            return dict(self._rejections)


_METRICS: weakref.WeakKeyDictionary[RuntimeMetrics, SecurityMetrics] = weakref.WeakKeyDictionary()
_METRICS_LOCK = threading.Lock()


def security_metrics(metrics: RuntimeMetrics) -> SecurityMetrics:
    """The one :class:`SecurityMetrics` of an app's registry (the server and the replicator
    both count into it)."""
    with _METRICS_LOCK:
        found = _METRICS.get(metrics)
        if found is None:
            found = _METRICS[metrics] = SecurityMetrics(metrics)
        return found
