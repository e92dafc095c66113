"""Control-record validation as Spark SQL expressions: :mod:`progress_control.trust` for Spark.

A row carrying a ``progress-control`` header is never data. :func:`with_control_verdict`
decides, per row and with the same rules in the same order as
:class:`progress_control.trust.ControlRecordValidator`, whether it may move the watermark
(``accepted``) or why not (a :class:`progress_control.trust.Verdict` value: ``malformed``,
``negative-timestamp``, ``future-timestamp``, ``source-not-allowed``, ``unsigned``,
``unknown-key``, ``bad-signature``).

Everything is a vectorised Spark expression, no Python UDF. The HMAC-SHA256 of a signed (v2)
marker is composed from ``sha2``: ``sha256((K ^ opad) || sha256((K ^ ipad) || payload))`` with
each key's padded ``K ^ ipad`` and ``K ^ opad`` as 64-byte binary literals, the payload built from
the row's topic, partition and timestamp and the marker's own sequence and source-id bytes
(:func:`progress_control.trust.signed_payload`). The whole verdict is one ``CASE WHEN``, so data
rows (no header) stop at the first branch and only rows with the header pay for the checks.

Those pad literals are as good as the keys, and Spark prints literals in query plans (``explain``,
the SQL tab of the UI, event logs). :func:`redact_key_material` adds a pattern matching them to
``spark.sql.redaction.string.regex``; the jobs call it whenever keys are configured.

The wall clock of the future-timestamp check is ``current_timestamp()``: in Structured Streaming
that is the micro-batch's timestamp (fixed in the offset log, so a re-run batch decides the same
way), in a batch query the query's start.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from progress_control.logging import OncePerKey
from progress_control.protocol import CONTROL_HEADER, MAC_SIZE, SIGNED_PROTOCOL_VERSION
from progress_control.trust import TrustPolicy, Verdict

__all__ = [
    "ACCEPTED",
    "REDACTION_PATTERN",
    "REJECTION_REASONS",
    "RejectionLog",
    "RejectionSample",
    "control_headers",
    "redact_key_material",
    "well_formed_marker",
    "with_control_verdict",
]

ACCEPTED = Verdict.ACCEPTED.value
REJECTION_REASONS: tuple[str, ...] = tuple(v.value for v in Verdict if v is not Verdict.ACCEPTED)
"""Every reason a control record is skipped, in the validator's order of checks."""

REDACTION_PATTERN = "(?i)0x[0-9a-f]{128}"
"""Matches how Spark prints a 64-byte binary literal (the HMAC pads, and nothing we write else)."""

_PREFIX_BYTES = 10  # version u8, sequence u64, source-id length u8
_BLOCK = 64  # SHA-256 block size: HMAC pads the key to it
_PAYLOAD_DOMAIN = b"progress-control/v2\x00"  # as progress_control.trust.signed_payload
# A skew this large can never be exceeded by a millisecond timestamp; capping keeps the Spark
# arithmetic inside a long whatever the setting (Python's integers never overflow, Spark's do).
_SKEW_CAP_MS = 2**62

logger = logging.getLogger(__name__)


def _byte_at(binary: Column, position: Column | int) -> Column:
    """The unsigned byte at 1-based ``position`` of a binary column as an int; null beyond it."""
    pos = position if isinstance(position, Column) else sf.lit(position)
    return sf.conv(sf.hex(sf.substring(binary, pos, sf.lit(1))), 16, 10).cast("int")


def _utf8(binary: Column) -> Column:
    return sf.is_valid_utf8(binary.cast("string"))


def _fixed_hex(number: Column, digits: int) -> Column:
    """``number`` as ``digits / 2`` big-endian bytes (two's complement: Spark's ``hex`` of a
    negative long is its 16-digit two's complement)."""
    return sf.unhex(sf.lpad(sf.hex(number.cast("long")), digits, "0"))


def _pads(secret: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer keys (RFC 2104): the key, hashed when longer than a block,
    zero-padded to the block, XOR 0x36 and XOR 0x5c."""
    key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
    key = key.ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def _key_map(keys: Mapping[str, bytes], pad: int) -> Column:
    """A literal map key id -> one of the key's pads (0: inner, 1: outer)."""
    entries: list[Column] = []
    for key_id, secret in sorted(keys.items()):
        entries += [sf.lit(key_id), sf.lit(bytearray(_pads(secret)[pad]))]
    return sf.create_map(*entries)


def _sha256(binary: Column) -> Column:
    return sf.unhex(sf.sha2(binary, 256))


@dataclass(frozen=True)
class _Marker:
    """The fields of a ``progress-control`` header value as columns (layout of
    :mod:`progress_control.protocol`, positions 1-based as Spark's ``substring`` counts)."""

    value: Column
    version: Column
    id_len: Column
    kid_len: Column
    """Key-id length; as the Python decoder, no byte after the source id reads as 0."""

    @classmethod
    def parse(cls, value: Column) -> _Marker:
        """The fields as expressions over ``value``."""
        id_len = _byte_at(value, _PREFIX_BYTES)
        kid_len = sf.coalesce(_byte_at(value, id_len + (_PREFIX_BYTES + 1)), sf.lit(0))
        return cls(value, _byte_at(value, 1), id_len, kid_len)

    @property
    def length(self) -> Column:
        return sf.octet_length(self.value)

    @property
    def id_end(self) -> Column:
        """Position of the source id's last byte."""
        return self.id_len + _PREFIX_BYTES

    @property
    def source(self) -> Column:
        return sf.substring(self.value, sf.lit(_PREFIX_BYTES + 1), self.id_len)

    @property
    def key_id(self) -> Column:
        return sf.substring(self.value, self.id_end + 2, self.kid_len)

    @property
    def signed_end(self) -> Column:
        """Position of the mac's last byte."""
        return self.id_end + 1 + self.kid_len + MAC_SIZE

    @property
    def mac(self) -> Column:
        return sf.substring(self.value, self.id_end + 2 + self.kid_len, sf.lit(MAC_SIZE))

    @property
    def signed_fields(self) -> Column:
        """Sequence (u64), source-id length (u8) and source id: contiguous in the marker, and
        exactly as :func:`progress_control.trust.signed_payload` wants them."""
        return sf.substring(self.value, sf.lit(2), self.id_len + (_PREFIX_BYTES - 1))

    def well_formed(self) -> Column:
        """:meth:`progress_control.protocol.ControlMarker.decode` succeeds (never null)."""
        version, length = self.version, self.length
        v1_ok = (
            (length > _PREFIX_BYTES)
            & (version >= 1)
            & (self.id_len >= 1)
            & (length >= self.id_end)
            & ((version > 1) | (length == self.id_end))
            & _utf8(self.source)
        )
        signature_ok = (
            (self.kid_len >= 1)
            & (length >= self.signed_end)
            & ((version != SIGNED_PROTOCOL_VERSION) | (length == self.signed_end))
            & _utf8(self.key_id)
        )
        return sf.coalesce(
            v1_ok & ((version < SIGNED_PROTOCOL_VERSION) | signature_ok), sf.lit(False)
        )


def control_headers(headers: Column) -> tuple[Column, Column]:
    """How many ``progress-control`` headers a row carries (0 without any headers) and the
    value of the first (null when none).

    Written with ``array_remove``/``array_position`` on the headers' keys rather than a lambda
    (``filter``): Spark runs higher-order functions interpreted, outside whole-stage code
    generation, and this is evaluated for every record of the topic.
    """
    keys = headers.getField("key")
    count = sf.coalesce(sf.size(keys) - sf.size(sf.array_remove(keys, CONTROL_HEADER)), sf.lit(0))
    position = sf.array_position(keys, CONTROL_HEADER)
    first = sf.when(position > 0, sf.element_at(headers.getField("value"), position.cast("int")))
    return count, first


def well_formed_marker(marker: Column) -> Column:
    """Whether a ``progress-control`` header value parses as a v1 or v2 (or later) marker, as
    :meth:`progress_control.protocol.ControlMarker.decode` decides; never null."""
    return _Marker.parse(marker).well_formed()


_TEMPORARY = ("_pc_count", "_pc_marker", "_pc_version", "_pc_id_len", "_pc_kid_len")


def with_control_verdict(
    frame: DataFrame,
    policy: TrustPolicy,
    *,
    headers: str = "headers",
    topic: str = "topic",
    partition: str = "partition",
    timestamp: str = "timestamp",
    verdict: str = "control",
    source: str = "control_source",
) -> DataFrame:
    """``frame`` (Spark's Kafka source schema by default) with two string columns:
    ``verdict``, null for a row without a ``progress-control`` header, else ``accepted`` or the
    reason the control record is skipped (see the module docstring); and ``source``, the marker's
    source id for rows with the header (``?`` when it is malformed, as the Python validator logs).

    The marker and its fields are computed in projections of their own, each referenced by the
    next: written as one expression, every use of a field would repeat the extraction of the
    header, and with keys the generated code outgrows the JVM's 64 KB method limit (Spark then
    falls back to slower, interpreted evaluation).
    """
    count, first = control_headers(sf.col(headers))
    staged = frame.withColumns({"_pc_count": count, "_pc_marker": first})
    parsed = _Marker.parse(sf.col("_pc_marker"))
    staged = staged.withColumns(
        {"_pc_version": parsed.version, "_pc_id_len": parsed.id_len, "_pc_kid_len": parsed.kid_len}
    )
    marker = _Marker(
        sf.col("_pc_marker"), sf.col("_pc_version"), sf.col("_pc_id_len"), sf.col("_pc_kid_len")
    )
    record = (sf.col(topic), sf.col(partition), sf.col(timestamp))
    decided = _verdict(sf.col("_pc_count"), marker, record, policy)
    source_id = sf.coalesce(sf.try_validate_utf8(marker.source.cast("string")), sf.lit("?"))
    return staged.withColumns(
        {
            verdict: decided,
            source: sf.when(sf.col("_pc_count") == 0, sf.lit(None).cast("string"))
            .when(decided == sf.lit(Verdict.MALFORMED.value), sf.lit("?"))
            .otherwise(source_id),
        }
    ).drop(*_TEMPORARY)


def _verdict(
    count: Column, marker: _Marker, record: tuple[Column, Column, Column], policy: TrustPolicy
) -> Column:
    topic, partition, event_time = record
    well_formed = (count == 1) & marker.well_formed()
    millis = sf.unix_millis(event_time)
    skew = sf.lit(min(policy.max_skew_ms, _SKEW_CAP_MS))
    verdict = (
        sf.when(count == 0, sf.lit(None).cast("string"))
        .when(~well_formed, sf.lit(Verdict.MALFORMED.value))
        .when(millis < 0, sf.lit(Verdict.NEGATIVE_TIMESTAMP.value))
        # ts - skew cannot overflow for ts >= 0, unlike now + skew.
        .when(
            millis - skew > sf.unix_millis(sf.current_timestamp()),
            sf.lit(Verdict.FUTURE_TIMESTAMP.value),
        )
    )
    if policy.allowed_sources is not None:
        allowed = sorted(policy.allowed_sources)
        verdict = verdict.when(
            ~marker.source.cast("string").isin(*allowed), sf.lit(Verdict.SOURCE_NOT_ALLOWED.value)
        )
    if policy.verification_keys:
        key_id = marker.key_id.cast("string")
        inner_pad = sf.try_element_at(_key_map(policy.verification_keys, 0), key_id)
        outer_pad = sf.try_element_at(_key_map(policy.verification_keys, 1), key_id)
        # progress_control.trust.signed_payload, byte for byte.
        payload = sf.concat(
            sf.lit(bytearray(_PAYLOAD_DOMAIN)),
            _fixed_hex(sf.octet_length(topic), 4),
            sf.encode(topic, "UTF-8"),
            _fixed_hex(partition, 8),
            _fixed_hex(millis, 16),
            marker.signed_fields,
        )
        expected = _sha256(sf.concat(outer_pad, _sha256(sf.concat(inner_pad, payload))))
        verdict = (
            verdict.when(marker.version < SIGNED_PROTOCOL_VERSION, sf.lit(Verdict.UNSIGNED.value))
            .when(inner_pad.isNull(), sf.lit(Verdict.UNKNOWN_KEY.value))
            # Not a constant-time comparison: a timing side channel through a Spark job's
            # micro-batches is not a practical oracle, and the mac covers the timestamp.
            .when(marker.mac != expected, sf.lit(Verdict.BAD_SIGNATURE.value))
        )
    return verdict.otherwise(sf.lit(ACCEPTED))


def redact_key_material(spark: SparkSession) -> None:
    """Make Spark redact the HMAC pad literals from the query plans it prints (``explain``, the
    UI, event logs): :data:`REDACTION_PATTERN` is added to ``spark.sql.redaction.string.regex``,
    keeping any pattern already set."""
    current = spark.conf.get("spark.sql.redaction.string.regex", None)
    if current and REDACTION_PATTERN in current:
        return
    combined = REDACTION_PATTERN if not current else f"(?:{current})|(?:{REDACTION_PATTERN})"
    spark.conf.set("spark.sql.redaction.string.regex", combined)


@dataclass(frozen=True, slots=True, order=True)
class RejectionSample:
    """One skipped control record's reason and where it came from, for the driver's log."""

    reason: str
    source: str
    topic: str
    partition: int


class RejectionLog:
    """Logs skipped control records once per source and reason, on the driver; thread-safe.

    Forged records may carry endless source ids: at most 1,000 pairs are remembered (and logged),
    as :class:`progress_control.trust.ControlRecordValidator` does.
    """

    def __init__(self, job: str) -> None:
        self._job = job
        self._logged = OncePerKey()

    def report(self, samples: Iterable[RejectionSample]) -> None:
        """Log the samples whose (source, reason) was not logged before."""
        for sample in sorted(samples):
            if not self._logged.first((sample.source, sample.reason)):
                continue
            logger.warning(
                "%(job)s: skipped a control record from source %(source)r on "
                "%(topic)s[%(partition)d]: %(reason)s; further ones from this source for this "
                "reason are counted, not logged",
                {
                    "job": self._job,
                    "source": sample.source,
                    "topic": sample.topic,
                    "partition": sample.partition,
                    "reason": sample.reason,
                },
            )
