"""A lenient, schema-driven reader for kio entities that skips unknown tagged fields.

kio's native `entity_reader` raises `KeyError('Unknown tagged field tag: N')` when a flexible struct
carries a tag its schema does not know. KIP-482 says a reader must skip such tags (that is how newer
clients add optional fields without a version bump), so the codec falls back to this reader when
the native one raises KeyError.

Invariants:
- Built once per entity class, from kio's own dataclass field metadata (`kafka_type`, `tag`) and
  kio's native primitive readers; nested entities and arrays of entities use this reader again, so
  unknown tags are skipped at every nesting level.
- A known tagged field is parsed from its own bytes and the read offset then jumps by the declared
  size, so a field we parse shorter than declared cannot desynchronise the rest of the message.
- Every failure is a kio `DecodeError` (or what kio's native readers raise); the codec maps both to
  MalformedRequest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, fields
from functools import cache
from typing import Any

from kio._kio_native import get_field_reader
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial.errors import BufferUnderflow, UnexpectedNull
from kio.serial.readers import (
    compact_array_reader,
    legacy_array_reader,
    read_int8,
    read_unsigned_varint,
)

__all__ = ["lenient_entity_reader"]

# kio's reader convention: (buffer, offset) -> (value, bytes consumed). The buffer is bytes,
# bytearray or memoryview.
FieldReader = Callable[[Any, int], tuple[Any, int]]


def _nullable_entity(read: FieldReader) -> FieldReader:
    # KIP-893 nullable structs: an int8 marker, -1 = null, then the struct.
    def read_nullable(buffer: Any, offset: int) -> tuple[Any, int]:
        marker, _ = read_int8(buffer, offset)
        if marker < 0:
            return None, 1
        value, size = read(buffer, offset + 1)
        return value, size + 1

    return read_nullable


def _non_null(read: FieldReader, name: str) -> FieldReader:
    def read_required(buffer: Any, offset: int) -> tuple[Any, int]:
        value, size = read(buffer, offset)
        if value is None:
            raise UnexpectedNull(f"null value for non-nullable field {name}")
        return value, size

    return read_required


def _field_reader(entity_type: type, field: Field[Any], is_tag: bool) -> FieldReader:
    field_class = classify_field(field)
    flexible: bool = entity_type.__flexible__  # type: ignore[attr-defined]
    optional = not is_tag and is_optional(field)
    if isinstance(field_class, EntityField):
        inner = lenient_entity_reader(field_class.type_)
        return _nullable_entity(inner) if optional else inner
    if isinstance(field_class, EntityTupleField):
        inner = lenient_entity_reader(field_class.type_)
        array = (compact_array_reader if flexible else legacy_array_reader)(inner)
        return array if optional else _non_null(array, field.name)
    # Primitives and arrays of primitives: kio's native reader, which knows every kafka_type.
    is_request_header = entity_type.__name__ == "RequestHeader"
    native: FieldReader = get_field_reader(entity_type, field, is_request_header, is_tag)
    return native


@cache
def lenient_entity_reader(entity_type: type) -> FieldReader:
    """A reader for `entity_type` that skips unknown tagged fields at every level."""
    flexible: bool = entity_type.__flexible__  # type: ignore[attr-defined]
    plain: list[tuple[str, FieldReader]] = []
    tagged: dict[int, tuple[str, FieldReader]] = {}
    defaults: dict[str, Any] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            plain.append((field.name, _field_reader(entity_type, field, False)))
        else:
            tagged[int(tag)] = (field.name, _field_reader(entity_type, field, True))
            defaults[field.name] = get_tagged_field_default(field)

    def read_entity(buffer: Any, start: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        offset = start
        for name, read in plain:
            values[name], size = read(buffer, offset)
            offset += size
        if flexible:
            values.update(defaults)
            count, size = read_unsigned_varint(buffer, offset)
            offset += size
            for _ in range(count):
                tag, size = read_unsigned_varint(buffer, offset)
                offset += size
                length, size = read_unsigned_varint(buffer, offset)
                offset += size
                end = offset + length
                if end > len(buffer):
                    raise BufferUnderflow("tagged field runs past the end of the buffer")
                known = tagged.get(tag)
                if known is not None:  # unknown tags are skipped (KIP-482)
                    name, read = known
                    values[name], _ = read(memoryview(buffer)[:end], offset)
                offset = end
        return entity_type(**values), offset - start

    return read_entity
