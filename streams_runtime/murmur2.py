"""Kafka's default partitioner for keyed records, in Python.

``murmur2`` is a line-by-line port of ``org.apache.kafka.common.utils.Utils.murmur2`` (seed
``0x9747b28c``, signed 32-bit result) and :func:`partition_for_key` is the Java producer's
``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions``.

The runtime's own producer is librdkafka with ``partitioner=murmur2_random``, which computes the
same partition for every non-null key (null keys go to a random partition there, which never
matters for a store: null keys are dropped before they reach one).
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for_key", "to_positive"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: the signed 32-bit hash (as Java's ``int``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = int.from_bytes(data[i4 : i4 + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length % 4
    base = length & ~3
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's ``murmur2_random``) picks for
    the serialized ``key`` among ``num_partitions``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
