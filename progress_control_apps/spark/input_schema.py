"""What a data record of the events topic must look like: :class:`InputSchema`.

The jobs read click events: a JSON object value, a user, and an event time. The schema says
where each comes from; :func:`progress_control_apps.spark.source.parse_records` checks every record
against it in Spark SQL expressions and sends a record that does not fit to the errors output,
with a reason naming the field (``missing field 'uid'``).

The default is the shape the jobs always read, the one the demo's runtime forwards to its events
topic: value ``{"user": <string>, "page": <string>, "ts": <integer>}`` (other fields ignored),
event time the Kafka record timestamp. ``ts`` is checked to be an integer but not used.

The value may also be Schema Registry-framed (Confluent's wire format: magic byte 0, a 4-byte
schema id, the payload): Avro, decoded with the writer schema its id names
(:mod:`progress_control_apps.spark.registry`, :mod:`progress_control_apps.spark.value_format`), or
JSON text (JSON Schema). The field checks are the same whatever the format.

This module imports no Spark, so command lines and settings can build a schema cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_INPUT_SCHEMA",
    "MAX_EPOCH_MS",
    "UNKNOWN_SCHEMA_ID_POLICIES",
    "VALUE_FORMATS",
    "InputSchema",
]

MAX_EPOCH_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z, the latest instant a Spark timestamp holds: a time field beyond it
(or negative) is an error, not an overflow."""

VALUE_FORMATS = ("json", "avro", "json-schema")
"""How a data record's value is encoded: JSON text; Schema Registry-framed Avro; Schema
Registry-framed JSON text (what a JSON Schema serializer writes)."""

UNKNOWN_SCHEMA_ID_POLICIES = ("error", "fail")
"""What a registry-framed value whose schema id the job did not fetch at start does: an error
row (``unknown schema id 7``), or a failed query (restarted, the job fetches the schemas again
and reads it)."""


@dataclass(frozen=True, slots=True)
class InputSchema:
    """Where a data record's user and event time come from, and which fields it must carry.

    The value is always a JSON object. ``None`` turns a field off:

    - ``user_field``: the value field holding the user, a JSON string; ``None``: the record key
      (UTF-8, not null) is the user.
    - ``time_field``: the value field holding the event time, epoch milliseconds as a JSON integer
      (``1714557600000``; not a string, not a fraction, not an exponent, 0 to
      :data:`MAX_EPOCH_MS`); ``None``: the Kafka record timestamp is the event time.
    - ``page_field``: a value field every record must carry as a JSON string (kept as the
      ``page`` column of :func:`~progress_control_apps.spark.source.parse_records`); ``None``: none.
    - ``integer_fields``: value fields every record must carry as JSON integers, checked and
      otherwise unused (default ``("ts",)``, as the jobs always checked the click's own time).

    Control records move the watermark by their Kafka record timestamp whatever the schema, so a
    ``time_field`` must hold the time the record was stamped with (what the producer passed as
    its timestamp, as the demo's ``ts`` is); an event time earlier than its record's timestamp
    can arrive after a tick moved the watermark past it, and be dropped as late.

    How the value is encoded (:data:`VALUE_FORMATS`):

    - ``value_format``: ``json`` (the default), ``avro`` or ``json-schema``, the last two
      Schema Registry-framed (magic byte 0, 4-byte schema id, payload). An Avro value is decoded
      with its writer schema and read as the subject's latest version when the job started;
      its fields are then checked as a JSON object's would be (``long`` and ``int`` are
      integers, ``string`` and ``enum`` strings; a ``timestamp-millis`` or ``timestamp-micros``
      top-level field is epoch milliseconds).
    - ``schema_registry_url``: the registry's Confluent-compatible API (required for ``avro``;
      for ``json-schema`` it makes ids the subject does not know errors; unused for ``json``).
      Credentials go in the URL (``https://user:secret@host``); :meth:`describe` never shows
      them.
    - ``value_subject``: the subject holding the value schemas; ``None``: ``<topic>-value`` for
      each topic read (TopicNameStrategy).
    - ``on_unknown_schema_id``: ``error`` (an error row, ``unknown schema id 7``) or ``fail`` (the
      query fails; see :data:`UNKNOWN_SCHEMA_ID_POLICIES`).
    """

    user_field: str | None = "user"
    time_field: str | None = None
    page_field: str | None = "page"
    integer_fields: tuple[str, ...] = ("ts",)
    value_format: str = "json"
    schema_registry_url: str | None = None
    value_subject: str | None = None
    on_unknown_schema_id: str = "error"

    def __post_init__(self) -> None:
        if isinstance(self.integer_fields, str):
            raise TypeError("integer_fields is a tuple of field names, not a string")
        object.__setattr__(self, "integer_fields", tuple(self.integer_fields))
        named = [
            ("user_field", self.user_field),
            ("time_field", self.time_field),
            ("page_field", self.page_field),
            *(("integer_fields", name) for name in self.integer_fields),
        ]
        for setting, name in named:
            if name is None:
                continue
            if not isinstance(name, str) or not name:
                raise ValueError(f"{setting}: a field name is a non-empty string, got {name!r}")
            if "'" in name and '"' in name:
                raise ValueError(f"{setting}: a field name holds ' or \", not both: {name!r}")
        if self.value_format not in VALUE_FORMATS:
            raise ValueError(
                f"value_format: one of {', '.join(VALUE_FORMATS)}, got {self.value_format!r}"
            )
        if self.on_unknown_schema_id not in UNKNOWN_SCHEMA_ID_POLICIES:
            raise ValueError(
                "on_unknown_schema_id: one of "
                f"{', '.join(UNKNOWN_SCHEMA_ID_POLICIES)}, got {self.on_unknown_schema_id!r}"
            )
        if self.value_format == "avro" and not self.schema_registry_url:
            raise ValueError("value_format 'avro' needs schema_registry_url (the writer schemas)")
        if self.value_subject is not None and not self.value_subject:
            raise ValueError("value_subject: a subject name is a non-empty string")

    @property
    def user_from_key(self) -> bool:
        """Whether the record key is the user."""
        return self.user_field is None

    @property
    def time_from_record(self) -> bool:
        """Whether the Kafka record timestamp is the event time."""
        return self.time_field is None

    @property
    def registry_framed(self) -> bool:
        """Whether values carry the Schema Registry header (magic byte, schema id)."""
        return self.value_format != "json"

    def value_subjects(self, topics: str) -> dict[str, str]:
        """The value subject of each topic of a comma list: ``value_subject``, else
        ``<topic>-value``."""
        names = [topic.strip() for topic in topics.split(",") if topic.strip()]
        return {topic: self.value_subject or f"{topic}-value" for topic in names}

    def describe(self) -> str:
        """One line for logs and ``--help``-style summaries, e.g. ``user: value field 'user';
        event time: record timestamp; also required: page (string), ts (integer)``; a
        registry-framed format is named first (``value: avro, Schema Registry-framed; ...``)."""
        user = "record key" if self.user_field is None else f"value field {self.user_field!r}"
        time = (
            "record timestamp"
            if self.time_field is None
            else f"value field {self.time_field!r} (epoch ms)"
        )
        required = [] if self.page_field is None else [f"{self.page_field} (string)"]
        required += [f"{name} (integer)" for name in self.integer_fields]
        also = f"; also required: {', '.join(required)}" if required else ""
        value = f"value: {self.value_format}, Schema Registry-framed; " * self.registry_framed
        return f"{value}user: {user}; event time: {time}{also}"


DEFAULT_INPUT_SCHEMA = InputSchema()
"""What the jobs read unless told otherwise (see the module docstring)."""
