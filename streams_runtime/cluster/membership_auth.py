"""Whose membership records are believed (issue 16; docs/operations/security.md).

Each record in ``<application_id>-membership`` carries an HMAC-SHA256 in its ``pc-membership-mac``
header over the topic, the key (instance id) and the whole value (the JSON, heartbeat included);
a tombstone's covers the time of the leave (``pc-membership-left-ms``) instead. The key is
``membership_secret`` (or ``membership_secret_file``); without one it is derived from the query
token (every instance shares that already), so anyone holding the token can write membership
records: set a separate ``membership_secret`` where query clients are less trusted than the
instances. Records that do not verify are ignored and counted; an instance forwards queries (and
its token) only to members whose records verified. A replayed valid record is harmless: one
older than the liveness window is not live, and the view never takes a record older than the
one it holds for that instance. With neither a secret nor a token (loopback only, or opted out)
records are unsigned and believed: a warning says so at start-up.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streams_runtime.queries.security import query_token, read_secret, setting_name

if TYPE_CHECKING:
    from streams_runtime.settings import RuntimeSettings

__all__ = [
    "LEFT_MS_HEADER",
    "MAC_HEADER",
    "MIN_SECRET_BYTES",
    "MembershipAuthenticator",
    "MembershipVerdict",
    "check_membership_settings",
    "membership_key",
]

MAC_HEADER = "pc-membership-mac"
LEFT_MS_HEADER = "pc-membership-left-ms"
_MAC_DOMAIN = b"progress-control/membership/v1\x00"
_DERIVE_DOMAIN = b"progress-control/membership-key-from-query-token/v1"
MIN_SECRET_BYTES = 16


def check_membership_settings(settings: RuntimeSettings) -> None:
    """Refuse an ambiguous or too short membership secret, naming it (``ValueError``)."""
    if settings.membership_secret is not None and settings.membership_secret_file is not None:
        raise ValueError(
            f"set one of {setting_name('membership_secret')} and "
            f"{setting_name('membership_secret_file')}"
        )
    secret = membership_key(settings)
    has_own_secret = (
        settings.membership_secret is not None or settings.membership_secret_file is not None
    )
    if has_own_secret and secret is not None and len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"{setting_name('membership_secret')} must be at least {MIN_SECRET_BYTES} bytes"
        )


def membership_key(settings: RuntimeSettings) -> bytes | None:
    """The HMAC key of membership records: ``membership_secret`` (or its file), else derived
    from the query token, else ``None`` (records unsigned)."""
    secret: str | None = None
    if settings.membership_secret is not None:
        secret = settings.membership_secret.get_secret_value()
    elif settings.membership_secret_file is not None:
        secret = read_secret(settings.membership_secret_file, "membership_secret_file")
    if secret is not None:
        return secret.encode("utf-8")
    token = query_token(settings)
    if token is None:
        return None
    # Domain-separated: the MAC key is not the token itself.
    return hmac.new(token.encode("utf-8"), _DERIVE_DOMAIN, hashlib.sha256).digest()


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
