"""The Order schemas the Schema Registry tests share: Avro (two compatible versions), JSON
Schema, and a Protobuf message type built at run time (no protoc needed)."""

from __future__ import annotations

import functools
import json
from typing import Any

ORDER_AVRO = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "test",
        "fields": [{"name": "user", "type": "string"}, {"name": "amount", "type": "long"}],
    }
)
ORDER_AVRO_V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "test",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "amount", "type": "long"},
            {"name": "coupon", "type": ["null", "string"], "default": None},
        ],
    }
)
"""ORDER_AVRO with a field added with a default: backward and forward compatible."""

ORDER_JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {"user": {"type": "string"}, "amount": {"type": "integer"}},
        "required": ["user", "amount"],
    }
)


@functools.cache
def order_message_type() -> Any:
    """``test.Order { string user = 1; int64 amount = 2; }`` as a generated class would be."""
    from google.protobuf import (  # type: ignore[import-untyped]
        descriptor_pb2,
        descriptor_pool,
        message_factory,
    )

    field = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.Default()
    try:
        descriptor = pool.FindMessageTypeByName("test.Order")
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(
            name="test/order.proto", package="test", syntax="proto3"
        )
        message = proto.message_type.add(name="Order")
        message.field.add(name="user", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
        message.field.add(
            name="amount", number=2, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL
        )
        pool.Add(proto)
        descriptor = pool.FindMessageTypeByName("test.Order")
    return message_factory.GetMessageClass(descriptor)
