"""Protobuf requests with invalid UTF-8, repaired instead of refused.

protobuf's parser rejects a whole request when one string field is not UTF-8; the Collector's
does not, so exporters in other languages send such data and get it accepted there. Rather than
lose every span of the request, the wire format is walked once more with the message
descriptors, bad strings become U+FFFD, and the repair is recorded as a problem.
"""

from __future__ import annotations

from typing import Any, Final

_MAX_PB_DEPTH: Final = 100  # protobuf's own recursion limit


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


_ONE_BYTE: Final = tuple(bytes((n,)) for n in range(0x80))


def varint_bytes(value: int) -> bytes:
    """A protobuf varint (also what `_wire` writes lengths and tags with)."""
    # most are lengths of a span or a value: one or two bytes, without the loop
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def repair_utf8(data: bytes, descriptor: Any, depth: int, repaired: list[int]) -> bytes:
    """``data`` (a serialized message of type ``descriptor``) with every string field that is
    not UTF-8 decoded with replacement characters; ``ValueError`` on malformed wire data."""
    if depth > _MAX_PB_DEPTH:
        raise ValueError("nested too deeply")
    fields = descriptor.fields_by_number
    out = bytearray()
    pos, size = 0, len(data)
    while pos < size:
        start = pos
        key, pos = _read_varint(data, pos)
        wire_type = key & 7
        if wire_type == 0:
            _, pos = _read_varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            key_end = pos
            length, pos = _read_varint(data, pos)
            end = pos + length
            if end > size:
                raise ValueError("truncated field")
            field = fields.get(key >> 3)
            payload = data[pos:end]
            fixed = payload
            if field is not None and field.type == field.TYPE_STRING:
                try:
                    payload.decode("utf-8")
                except UnicodeDecodeError:
                    fixed = payload.decode("utf-8", "replace").encode("utf-8")
                    repaired[0] += 1
            elif field is not None and field.type == field.TYPE_MESSAGE:
                fixed = repair_utf8(payload, field.message_type, depth + 1, repaired)
            pos = end
            if fixed is not payload and fixed != payload:
                out += data[start:key_end] + varint_bytes(len(fixed)) + fixed
                continue
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        if pos > size:
            raise ValueError("truncated field")
        out += data[start:pos]
    return bytes(out)

