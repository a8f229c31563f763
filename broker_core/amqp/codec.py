"""AMQP 1.0 type system: encode and decode values (OASIS AMQP 1.0, part 1).

Decoding maps AMQP values onto plain Python: null -> None, integers -> int, strings -> str, binary ->
bytes, list -> list, map -> dict, symbol -> `Symbol` (a str subclass, so callers can tell a symbol from
a string, which the Artemis mirror requires), timestamp -> `Timestamp`, described -> `Described`.
Encoding picks the narrowest wire form; Python ints encode as AMQP `long` unless wrapped in one of the
typed wrappers below (`UInt`, `ULong`, ...), because a Python int has no AMQP type of its own.

Hot-path note: the broker passes message payloads through as bytes and decodes only performatives
and the few message fields routing needs, so this module is tuned for small lists of small values.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from .types import (
    Array,
    Byte,
    DecodeError,
    Described,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

__all__ = [
    "Array",
    "Byte",
    "DecodeError",
    "Described",
    "Int",
    "Short",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode",
    "decode_value",
    "encode",
    "skip_value",
]


# --------------------------------------------------------------------------------------------- decode

_B = struct.Struct(">B").unpack_from
_b = struct.Struct(">b").unpack_from
_H = struct.Struct(">H").unpack_from
_h = struct.Struct(">h").unpack_from
_I = struct.Struct(">I").unpack_from
_i = struct.Struct(">i").unpack_from
_Q = struct.Struct(">Q").unpack_from
_q = struct.Struct(">q").unpack_from
_f = struct.Struct(">f").unpack_from
_d = struct.Struct(">d").unpack_from
_II = struct.Struct(">II").unpack_from

Decoder = Callable[[bytes, int], tuple[Any, int]]


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise DecodeError(f"value runs past the end of the buffer ({end} > {len(buf)})")


def _fixed(
    width: int, unpack: Callable[[bytes, int], tuple[Any, ...]], wrap: Callable[[Any], Any]
) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        end = pos + width
        _need(buf, end)
        return wrap(unpack(buf, pos)[0]), end

    return dec


def _const(value: Any) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        return value, pos

    return dec


def _ident(v: Any) -> Any:
    return v


def _vbin(size_width: int, kind: str) -> Decoder:
    unpack = _B if size_width == 1 else _I

    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        _need(buf, pos + size_width)
        n = unpack(buf, pos)[0]
        start = pos + size_width
        end = start + n
        _need(buf, end)
        raw = buf[start:end]
        if kind == "bin":
            return bytes(raw), end
        try:
            if kind == "str":
                return raw.decode("utf-8"), end
            return Symbol(raw.decode("ascii")), end
        except UnicodeDecodeError as exc:
            raise DecodeError(f"invalid {kind} encoding") from exc

    return dec


def _compound(size_width: int, is_map: bool) -> Decoder:
    hdr = _B if size_width == 1 else _I

    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        _need(buf, pos + 2 * size_width)
        size = hdr(buf, pos)[0]
        count = hdr(buf, pos + size_width)[0]
        end = pos + size_width + size
        _need(buf, end)
        p = pos + 2 * size_width
        items = []
        for _ in range(count):
            v, p = decode_value(buf, p)
            items.append(v)
        if p != end:
            raise DecodeError("compound size does not match its contents")
        if is_map:
            if count % 2:
                raise DecodeError("map with an odd number of elements")
            return dict(zip(items[::2], items[1::2], strict=True)), end
        return items, end

    return dec


def _array(size_width: int) -> Decoder:
    hdr = _B if size_width == 1 else _I

    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        _need(buf, pos + 2 * size_width + 1)
        size = hdr(buf, pos)[0]
        count = hdr(buf, pos + size_width)[0]
        end = pos + size_width + size
        _need(buf, end)
        p = pos + 2 * size_width
        code = buf[p]
        descriptor = None
        if code == 0x00:
            descriptor, p = decode_value(buf, p + 1)
            code = buf[p]
        p += 1
        elem = _DECODERS.get(code)
        if elem is None:
            raise DecodeError(f"unknown array element constructor 0x{code:02x}")
        out = Array(code)
        for _ in range(count):
            v, p = elem(buf, p)
            out.append(Described(descriptor, v) if descriptor is not None else v)
        if p != end:
            raise DecodeError("array size does not match its contents")
        return out, end

    return dec


def _described(buf: bytes, pos: int) -> tuple[Any, int]:
    descriptor, p = decode_value(buf, pos)
    value, p = decode_value(buf, p)
    factory = DESCRIBED_TYPES.get(descriptor)
    if factory is not None:
        return factory(value), p
    return Described(descriptor, value), p


def _decimal(width: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        _need(buf, pos + width)
        return bytes(buf[pos : pos + width]), pos + width

    return dec


def _uuid(buf: bytes, pos: int) -> tuple[Any, int]:
    _need(buf, pos + 16)
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _char(buf: bytes, pos: int) -> tuple[Any, int]:
    _need(buf, pos + 4)
    try:
        return chr(_I(buf, pos)[0]), pos + 4
    except (ValueError, OverflowError) as exc:
        raise DecodeError("invalid char") from exc


def _bool8(buf: bytes, pos: int) -> tuple[Any, int]:
    _need(buf, pos + 1)
    return buf[pos] != 0, pos + 1


_DECODERS: dict[int, Decoder] = {
    0x40: _const(None),
    0x41: _const(True),
    0x42: _const(False),
    0x56: _bool8,
    0x50: _fixed(1, _B, _ident),
    0x60: _fixed(2, _H, _ident),
    0x70: _fixed(4, _I, _ident),
    0x52: _fixed(1, _B, _ident),
    0x43: _const(0),
    0x80: _fixed(8, _Q, _ident),
    0x53: _fixed(1, _B, _ident),
    0x44: _const(0),
    0x51: _fixed(1, _b, _ident),
    0x61: _fixed(2, _h, _ident),
    0x71: _fixed(4, _i, _ident),
    0x54: _fixed(1, _b, _ident),
    0x81: _fixed(8, _q, _ident),
    0x55: _fixed(1, _b, _ident),
    0x72: _fixed(4, _f, _ident),
    0x82: _fixed(8, _d, _ident),
    0x74: _decimal(4),
    0x84: _decimal(8),
    0x94: _decimal(16),
    0x73: _char,
    0x83: _fixed(8, _q, Timestamp),
    0x98: _uuid,
    0xA0: _vbin(1, "bin"),
    0xB0: _vbin(4, "bin"),
    0xA1: _vbin(1, "str"),
    0xB1: _vbin(4, "str"),
    0xA3: _vbin(1, "sym"),
    0xB3: _vbin(4, "sym"),
    0x45: lambda buf, pos: ([], pos),
    0xC0: _compound(1, False),
    0xD0: _compound(4, False),
    0xC1: _compound(1, True),
    0xD1: _compound(4, True),
    0xE0: _array(1),
    0xF0: _array(4),
    0x00: _described,
}

# descriptor code -> factory(list-or-value) -> object; filled in by `performatives`.
DESCRIBED_TYPES: dict[Any, Callable[[Any], Any]] = {}


def decode_value(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """Decode one value at `pos`; return it and the position after it."""
    if pos >= len(buf):
        raise DecodeError("expected a value, found the end of the buffer")
    dec = _DECODERS.get(buf[pos])
    if dec is None:
        raise DecodeError(f"unknown type constructor 0x{buf[pos]:02x} at offset {pos}")
    return dec(buf, pos + 1)


def decode(buf: bytes) -> Any:
    """Decode exactly one value filling `buf`."""
    value, end = decode_value(buf, 0)
    if end != len(buf):
        raise DecodeError(f"{len(buf) - end} trailing bytes after the value")
    return value


_FIXED_WIDTH = {
    0x40: 0,
    0x41: 0,
    0x42: 0,
    0x43: 0,
    0x44: 0,
    0x45: 0,
    0x50: 1,
    0x51: 1,
    0x52: 1,
    0x53: 1,
    0x54: 1,
    0x55: 1,
    0x56: 1,
    0x60: 2,
    0x61: 2,
    0x70: 4,
    0x71: 4,
    0x72: 4,
    0x73: 4,
    0x74: 4,
    0x80: 8,
    0x81: 8,
    0x82: 8,
    0x83: 8,
    0x84: 8,
    0x94: 16,
    0x98: 16,
}


# How skip_value steps over a value, by constructor: a fixed width (0-16), or one of these.
_SIZE8, _SIZE32, _DESCRIBED, _INVALID = 256, 257, 258, 259
_SKIP = [_INVALID] * 256
for _code, _width in _FIXED_WIDTH.items():
    _SKIP[_code] = _width
for _code in range(256):
    if _code >> 4 in (0xA, 0xC, 0xE):
        _SKIP[_code] = _SIZE8
    elif _code >> 4 in (0xB, 0xD, 0xF):
        _SKIP[_code] = _SIZE32
_SKIP[0x00] = _DESCRIBED


def skip_value(buf: bytes, pos: int) -> int:
    """Return the position after the value at `pos` without building it (used to find sections)."""
    n = len(buf)
    if pos >= n:
        raise DecodeError("expected a value, found the end of the buffer")
    code = buf[pos]
    pos += 1
    how = _SKIP[code]
    if how < _SIZE8:
        end = pos + how
    elif how == _SIZE8:
        if pos >= n:
            raise DecodeError(f"value runs past the end of the buffer ({pos + 1} > {n})")
        end = pos + 1 + buf[pos]
    elif how == _SIZE32:
        if pos + 4 > n:
            raise DecodeError(f"value runs past the end of the buffer ({pos + 4} > {n})")
        end = pos + 4 + _I(buf, pos)[0]
    elif how == _DESCRIBED:
        return skip_value(buf, skip_value(buf, pos))
    else:
        raise DecodeError(f"unknown type constructor 0x{code:02x}")
    if end > n:
        raise DecodeError(f"value runs past the end of the buffer ({end} > {n})")
    return end


# --------------------------------------------------------------------------------------------- encode

_pB = struct.Struct(">BB").pack
_pH = struct.Struct(">BH").pack
_pI = struct.Struct(">BI").pack
_pQ = struct.Struct(">BQ").pack
_pb = struct.Struct(">Bb").pack
_ph = struct.Struct(">Bh").pack
_pi = struct.Struct(">Bi").pack
_pq = struct.Struct(">Bq").pack
_pd = struct.Struct(">Bd").pack
_pBII = struct.Struct(">BII").pack
_pBBB = struct.Struct(">BBB").pack


def enc_bool(v: bool) -> bytes:
    return b"\x41" if v else b"\x42"


def enc_ubyte(v: int) -> bytes:
    return _pB(0x50, v)


def enc_ushort(v: int) -> bytes:
    return _pH(0x60, v)


def enc_uint(v: int) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return _pB(0x52, v)
    return _pI(0x70, v)


def enc_ulong(v: int) -> bytes:
    if v == 0:
        return b"\x44"
    if v < 256:
        return _pB(0x53, v)
    return _pQ(0x80, v)


def enc_long(v: int) -> bytes:
    if -128 <= v <= 127:
        return _pb(0x55, v)
    return _pq(0x81, v)


def enc_int(v: int) -> bytes:
    if -128 <= v <= 127:
        return _pb(0x54, v)
    return _pi(0x71, v)


def enc_binary(v: bytes) -> bytes:
    n = len(v)
    if n < 256:
        return _pB(0xA0, n) + v
    return _pI(0xB0, n) + v


def enc_string(v: str) -> bytes:
    raw = v.encode("utf-8")
    n = len(raw)
    if n < 256:
        return _pB(0xA1, n) + raw
    return _pI(0xB1, n) + raw


def enc_symbol(v: str) -> bytes:
    raw = v.encode("ascii")
    n = len(raw)
    if n < 256:
        return _pB(0xA3, n) + raw
    return _pI(0xB3, n) + raw


def enc_list_of_encoded(items: list[bytes]) -> bytes:
    if not items:
        return b"\x45"
    body = b"".join(items)
    size = len(body) + 1
    if size < 256 and len(items) < 256:
        return _pBBB(0xC0, size, len(items)) + body
    return _pBII(0xD0, len(body) + 4, len(items)) + body


def enc_map_of_encoded(items: list[bytes]) -> bytes:
    body = b"".join(items)
    size = len(body) + 1
    if size < 256 and len(items) < 256:
        return _pBBB(0xC1, size, len(items)) + body
    return _pBII(0xD1, len(body) + 4, len(items)) + body


def enc_symbol_array(values: Iterable[str]) -> bytes:
    raws = [v.encode("ascii") for v in values]
    if all(len(r) < 256 for r in raws):
        body = b"".join(bytes((len(r),)) + r for r in raws)
        if len(body) + 2 < 256 and len(raws) < 256:
            return _pBBB(0xE0, len(body) + 2, len(raws)) + b"\xa3" + body
    body = b"".join(struct.pack(">I", len(r)) + r for r in raws)
    return _pBII(0xF0, len(body) + 5, len(raws)) + b"\xb3" + body


def enc_symbols(values: Any) -> bytes:
    """A `multiple="true"` symbol field: one symbol, or an array of them."""
    if isinstance(values, str):
        return enc_symbol(values)
    values = list(values)
    if len(values) == 1:
        return enc_symbol(values[0])
    return enc_symbol_array(values)


def enc_fields(m: dict[Any, Any]) -> bytes:
    """An AMQP `fields` map: symbol keys (plain str keys are sent as symbols)."""
    items: list[bytes] = []
    for k, v in m.items():
        items.append(enc_symbol(k) if isinstance(k, str) else encode(k))
        items.append(encode(v))
    return enc_map_of_encoded(items)


def _enc_array(v: Array) -> bytes:
    # Arrays we send are symbol arrays (capabilities) or small homogeneous lists; encode the elements
    # with their full constructor and strip it, which is exact for every fixed-code element type.
    if v.code in (0xA3, 0xB3):
        return enc_symbol_array(v)
    parts = []
    for item in v:
        raw = encode(item)
        parts.append(raw[1:])
        if raw[0] != v.code:
            raise ValueError(f"array element {item!r} does not encode as 0x{v.code:02x}")
    body = b"".join(parts)
    return _pBII(0xF0, len(body) + 5, len(v)) + bytes((v.code,)) + body


def encode(v: Any) -> bytes:
    """Encode a Python value (see the module docstring for the mapping)."""
    if v is None:
        return b"\x40"
    t = type(v)
    enc = _ENCODERS.get(t)
    if enc is not None:
        return enc(v)
    if hasattr(v, "encode_amqp"):
        return v.encode_amqp()  # type: ignore[no-any-return]
    for base, enc in _ENCODERS.items():
        if isinstance(v, base):
            return enc(v)
    raise TypeError(f"cannot encode {t.__name__} as AMQP")


def _enc_list(v: list[Any]) -> bytes:
    return enc_list_of_encoded([encode(x) for x in v])


def _enc_map(v: dict[Any, Any]) -> bytes:
    items: list[bytes] = []
    for k, x in v.items():
        items.append(encode(k))
        items.append(encode(x))
    return enc_map_of_encoded(items)


def _enc_described(v: Described) -> bytes:
    d = v.descriptor
    head = enc_ulong(d) if isinstance(d, int) and not isinstance(d, bool) else encode(d)
    return b"\x00" + head + encode(v.value)


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    bool: enc_bool,
    int: enc_long,
    float: lambda v: _pd(0x82, v),
    str: enc_string,
    Symbol: enc_symbol,
    bytes: enc_binary,
    bytearray: lambda v: enc_binary(bytes(v)),
    memoryview: lambda v: enc_binary(bytes(v)),
    list: _enc_list,
    tuple: lambda v: _enc_list(list(v)),
    dict: _enc_map,
    UByte: enc_ubyte,
    UShort: enc_ushort,
    UInt: enc_uint,
    ULong: enc_ulong,
    Byte: lambda v: _pb(0x51, v),
    Short: lambda v: _ph(0x61, v),
    Int: enc_int,
    Timestamp: lambda v: _pq(0x83, v),
    uuid.UUID: lambda v: b"\x98" + v.bytes,
    Described: _enc_described,
    Array: _enc_array,
}
