"""Which control records may move time: validation, signing and verification
(docs/concepts/trust.md).

Anyone who can write a topic can write a record with the ``progress-control`` header, so every
consumer we ship checks a control record before it moves time. A record carrying the header is
never data; when it fails a check it is skipped, counted per reason and logged once per source,
never fatal and never handed to a bad-record policy. The checks, in order:

1. the header parses (exactly one, well-formed): else ``malformed``;
2. the timestamp is not negative: else ``negative-timestamp``;
3. the timestamp is at most ``max_skew_ms`` ahead of the consumer's wall clock: else
   ``future-timestamp`` (a forged far-future tick would close every open window at once);
4. the source id is in ``allowed_sources``, when that is set: else ``source-not-allowed``;
5. when verification keys are set, the record is signed (protocol v2, else ``unsigned``) by a
   known key (else ``unknown-key``) with a valid HMAC-SHA256 (else ``bad-signature``).

The signature covers topic, partition, timestamp, sequence and source id, so a signed tick cannot
be replayed to another partition or re-dated.

Every writer we ship builds its control records with one :class:`ControlRecordSource` (its source
id, its sequence, and its signing key when it has one), so every hop signs the same way.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from progress_control.logging import OncePerKey
from progress_control.protocol import (
    DEFAULT_SENTINEL_KEY,
    SIGNED_PROTOCOL_VERSION,
    ControlMarker,
    ControlRecord,
    HeaderList,
    MalformedControlHeaderError,
    parse_control_headers,
)

__all__ = [
    "DEFAULT_MAX_SKEW_MS",
    "ControlRecordSource",
    "ControlRecordValidator",
    "SigningKey",
    "TrustPolicy",
    "Verdict",
    "allowed_sources",
    "parse_keys",
    "sign",
    "signed_payload",
]

DEFAULT_MAX_SKEW_MS = 300_000

logger = logging.getLogger(__name__)

_PAYLOAD_DOMAIN = b"progress-control/v2\x00"


@dataclass(frozen=True)
class SigningKey:
    """A shared secret and the id it is named by in signed headers (so keys can rotate)."""

    key_id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not 1 <= len(self.key_id.encode("utf-8")) <= 255:
            raise ValueError(f"a key id must be 1..255 bytes of UTF-8: {self.key_id!r}")
        if len(self.secret) < 16:
            raise ValueError(f"the secret of key {self.key_id!r} must be at least 16 bytes")


def parse_keys(spec: str) -> dict[str, bytes]:
    """Keys from their settings form ``"id1:secret1,id2:secret2"``; the secrets as UTF-8."""
    keys: dict[str, bytes] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key_id, sep, secret = item.partition(":")
        if not sep or not key_id or not secret:
            raise ValueError("keys are written as id:secret, separated by commas")
        keys[key_id] = SigningKey(key_id, secret.encode("utf-8")).secret
    return keys


def signed_payload(
    topic: str, partition: int, timestamp_ms: int, sequence: int, source_id: str
) -> bytes:
    """The bytes a v2 signature covers (length-prefixed, so no two field sets share them)."""
    topic_bytes, source = topic.encode("utf-8"), source_id.encode("utf-8")
    return b"".join(
        (
            _PAYLOAD_DOMAIN,
            struct.pack(">H", len(topic_bytes)),
            topic_bytes,
            struct.pack(">iqQB", partition, timestamp_ms, sequence, len(source)),
            source,
        )
    )


def _mac(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, payload, hashlib.sha256).digest()


def sign(
    marker: ControlMarker, topic: str, partition: int, timestamp_ms: int, key: SigningKey
) -> ControlMarker:
    """``marker`` as a signed (v2) marker for a control record at ``timestamp_ms`` on
    ``topic[partition]``."""
    payload = signed_payload(topic, partition, timestamp_ms, marker.sequence, marker.source_id)
    return ControlMarker(
        marker.source_id,
        marker.sequence,
        max(marker.version, SIGNED_PROTOCOL_VERSION),
        key_id=key.key_id,
        mac=_mac(key.secret, payload),
    )


class ControlRecordSource:
    """One writer's control records: its source id, its per-source sequence (from 0, one number
    per record), its sentinel key (``None``: null-key records; ``null_key_topics`` picks topics
    whose records have a null key whatever the sentinel) and, when it has one, the key it signs
    with. Signed records are protocol v2 (:func:`sign`), the others v1.

    Thread-safe: the sequence is taken under a lock, so two threads never send one number twice.
    """

    def __init__(
        self,
        source_id: str,
        *,
        key: bytes | None = DEFAULT_SENTINEL_KEY,
        signing_key: SigningKey | None = None,
        null_key_topics: Callable[[str], bool] | None = None,
    ) -> None:
        ControlMarker(source_id, 0)  # a bad source id fails here, not at the first tick
        self.source_id = source_id
        self.key = key
        self.signing_key = signing_key
        self._null_key_topics = null_key_topics
        self._lock = threading.Lock()
        self._sequence = 0

    @property
    def next_sequence(self) -> int:
        """The sequence number of the next record."""
        with self._lock:
            return self._sequence

    def record(self, topic: str, partition: int, timestamp_ms: int) -> ControlRecord:
        """The next control record for ``topic[partition]`` at ``timestamp_ms``; its sequence
        number is used whether or not the record is ever sent (see :meth:`emit`)."""
        with self._lock:
            record = self._build(topic, partition, timestamp_ms)
            self._sequence += 1
            return record

    def emit(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        produce: Callable[[ControlRecord], object],
    ) -> ControlRecord:
        """Build the next control record and hand it to ``produce``; the sequence advances only
        when ``produce`` returns, so a record the producer refused (``BufferError`` from a full
        local queue, re-raised here) leaves no gap. ``produce`` runs under the sequence lock:
        it must not block (``confluent_kafka.Producer.produce`` raises instead)."""
        with self._lock:
            record = self._build(topic, partition, timestamp_ms)
            produce(record)
            self._sequence += 1
            return record

    def _build(self, topic: str, partition: int, timestamp_ms: int) -> ControlRecord:
        marker = ControlMarker(self.source_id, self._sequence)
        if self.signing_key is not None:  # v2: bound to this topic, partition and timestamp
            marker = sign(marker, topic, partition, timestamp_ms, self.signing_key)
        return ControlRecord(topic, partition, timestamp_ms, marker, key=self.key_for(topic))

    def key_for(self, topic: str) -> bytes | None:
        """The key of this source's records on ``topic``."""
        if self._null_key_topics is not None and self._null_key_topics(topic):
            return None
        return self.key

    def __repr__(self) -> str:
        key_id = None if self.signing_key is None else self.signing_key.key_id
        return (
            f"ControlRecordSource(source_id={self.source_id!r}, key={self.key!r}, "
            f"signing_key_id={key_id!r}, next_sequence={self._sequence})"
        )


class Verdict(enum.StrEnum):
    """What the validator decided about a control record; every value but ``accepted`` is the
    reason it was skipped (the label of the consumers' rejection metrics)."""

    ACCEPTED = "accepted"
    MALFORMED = "malformed"
    NEGATIVE_TIMESTAMP = "negative-timestamp"
    FUTURE_TIMESTAMP = "future-timestamp"
    SOURCE_NOT_ALLOWED = "source-not-allowed"
    UNSIGNED = "unsigned"
    UNKNOWN_KEY = "unknown-key"
    BAD_SIGNATURE = "bad-signature"


@dataclass(frozen=True)
class TrustPolicy:
    """What a consumer accepts as a control record."""

    max_skew_ms: int = DEFAULT_MAX_SKEW_MS
    """How far ahead of the local wall clock a control record's timestamp may be."""
    verification_keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """Key id -> secret. When set, only records signed by one of these keys are accepted."""
    allowed_sources: frozenset[str] | None = None
    """When set, only records from these source ids are accepted."""

    def __post_init__(self) -> None:
        if self.max_skew_ms < 0:
            raise ValueError(f"max_skew_ms must be >= 0, got {self.max_skew_ms}")


class ControlRecordValidator:
    """Checks control records against a :class:`TrustPolicy`; thread-safe.

    Rejections are counted per reason (:attr:`rejected`) and logged once per source and reason,
    so a flood of forged ticks costs one log line, not one per record.
    """

    def __init__(
        self, policy: TrustPolicy | None = None, *, clock_ms: Callable[[], int] | None = None
    ) -> None:
        self.policy = policy or TrustPolicy()
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._rejected: Counter[Verdict] = Counter()
        self._logged = OncePerKey()

    @property
    def rejected(self) -> Mapping[Verdict, int]:
        """Rejected records so far, per reason."""
        with self._lock:
            return dict(self._rejected)

    def check(
        self, topic: str, partition: int, timestamp_ms: int, headers: HeaderList | None
    ) -> Verdict:
        """Decide about one record carrying the ``progress-control`` header."""
        try:
            marker = parse_control_headers(headers)
        except MalformedControlHeaderError as exc:
            return self._reject(Verdict.MALFORMED, "?", topic, partition, str(exc))
        if marker is None:
            return self._reject(Verdict.MALFORMED, "?", topic, partition, "no control header")
        verdict = self._verdict(marker, topic, partition, timestamp_ms)
        if verdict is Verdict.ACCEPTED:
            return verdict
        return self._reject(verdict, marker.source_id, topic, partition, f"at {timestamp_ms}")

    def _verdict(  # noqa: PLR0911 - one return per check, in the documented order
        self, marker: ControlMarker, topic: str, partition: int, timestamp_ms: int
    ) -> Verdict:
        policy = self.policy
        if timestamp_ms < 0:
            return Verdict.NEGATIVE_TIMESTAMP
        if timestamp_ms > self._clock_ms() + policy.max_skew_ms:
            return Verdict.FUTURE_TIMESTAMP
        if policy.allowed_sources is not None and marker.source_id not in policy.allowed_sources:
            return Verdict.SOURCE_NOT_ALLOWED
        if not policy.verification_keys:
            return Verdict.ACCEPTED
        if marker.key_id is None or marker.mac is None:
            return Verdict.UNSIGNED
        secret = policy.verification_keys.get(marker.key_id)
        if secret is None:
            return Verdict.UNKNOWN_KEY
        payload = signed_payload(topic, partition, timestamp_ms, marker.sequence, marker.source_id)
        if not hmac.compare_digest(_mac(secret, payload), marker.mac):
            return Verdict.BAD_SIGNATURE
        return Verdict.ACCEPTED

    def _reject(
        self, verdict: Verdict, source: str, topic: str, partition: int, detail: str
    ) -> Verdict:
        with self._lock:
            self._rejected[verdict] += 1
        if self._logged.first((source, verdict)):
            logger.warning(
                "skipped a control record from source %(source)r on %(topic)s[%(partition)d]: "
                "%(reason)s (%(detail)s); further ones from this source for this reason are "
                "counted, not logged",
                {
                    "source": source,
                    "topic": topic,
                    "partition": partition,
                    "reason": verdict.value,
                    "detail": detail,
                },
            )
        return verdict


def allowed_sources(spec: str | Iterable[str] | None) -> frozenset[str] | None:
    """An allow-list from its settings form (comma-separated) or an iterable; ``None``, empty
    strings and empty lists mean "any source"."""
    if spec is None:
        return None
    items = spec.split(",") if isinstance(spec, str) else spec
    found = frozenset(item.strip() for item in items if item.strip())
    return found or None
