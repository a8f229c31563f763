"""Artemis's masked passwords, `ENC(...)`, read as Artemis's default codec writes them (pure).

Artemis's `DefaultSensitiveStringCodec` has two forms, and `artemis create` writes both:
- one-way, for the users file (`artemis user add`, `artemis mask --hash`): `ITERATIONS:SALT:HASH`, the
  hash PBKDF2 with HMAC-SHA1 over the password, the salt's bytes (hex) and the iteration count, the hash
  as long as its hex says (64 bytes). A login is checked against it; the password itself is never known.
- two-way, for passwords the broker must send (a broker connection's, the cluster password): the password
  encrypted with Blowfish (ECB, PKCS#5 padding) under a key, `clusterpassword` unless configured, written
  as the hex of a signed big integer (Java's `BigInteger(bytes).toString(16)`: a leading '-' when the
  first byte's high bit is set, leading zero bytes dropped).

Blowfish's constants are the hexadecimal digits of pi's fraction: computed here once, when first needed,
rather than written out as a thousand numbers.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct

DEFAULT_KEY = "clusterpassword"
_ENC = re.compile(r"^ENC\((.*)\)$", re.DOTALL)
_ONE_WAY = re.compile(r"^(\d+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)$")
_TWO_WAY = re.compile(r"^-?[0-9A-Fa-f]+$")


class MaskError(ValueError):
    """A masked value that is not one of the codec's forms, or does not decrypt."""


def masked(value: str) -> str | None:
    """What is inside `ENC(...)`, or None for a plain value."""
    match = _ENC.match(value.strip())
    return match.group(1).strip() if match else None


def is_one_way(inner: str) -> bool:
    return _ONE_WAY.match(inner) is not None


def verify(inner: str, password: str) -> bool:
    """Whether `password` is the one a one-way mask `ITERATIONS:SALT:HASH` was made from."""
    match = _ONE_WAY.match(inner)
    if match is None:
        raise MaskError("not a one-way mask (ITERATIONS:SALT:HASH)")
    iterations, salt, expected = int(match[1]), bytes.fromhex(match[2]), bytes.fromhex(match[3])
    if not 0 < iterations <= 10_000_000 or not expected:
        raise MaskError(f"a one-way mask with {iterations} iterations and a {len(expected)}-byte hash")
    got = hashlib.pbkdf2_hmac("sha1", password.encode(), salt, iterations, len(expected))
    return hmac.compare_digest(got, expected)


def hash_password(password: str, salt: bytes, iterations: int = 1024) -> str:
    """A one-way mask as Artemis writes it (for tests and tools): `ITERATIONS:SALT:HASH`, hex upper-case."""
    digest = hashlib.pbkdf2_hmac("sha1", password.encode(), salt, iterations, 64)
    return f"{iterations}:{salt.hex().upper()}:{digest.hex().upper()}"


def decode(inner: str, key: str = DEFAULT_KEY) -> str:
    """The password a two-way mask hides."""
    if not _TWO_WAY.match(inner):
        raise MaskError("not a two-way mask (hexadecimal)")
    number = int(inner, 16)
    size = max(8, -(-(number.bit_length() + 1) // 8))
    size = -(-size // 8) * 8  # whole Blowfish blocks, sign-extended as Java does before decrypting
    data = number.to_bytes(size, "big", signed=True)
    plain = _Blowfish(key.encode()).decrypt(data)
    pad = plain[-1]
    if not 1 <= pad <= 8 or plain[-pad:] != bytes([pad]) * pad:
        raise MaskError("does not decrypt with this key")
    try:
        return plain[:-pad].decode()
    except UnicodeDecodeError:
        raise MaskError("does not decrypt with this key") from None


def encode(password: str, key: str = DEFAULT_KEY) -> str:
    """A two-way mask as Artemis writes it (for tests and tools)."""
    raw = password.encode()
    pad = 8 - len(raw) % 8
    data = _Blowfish(key.encode()).encrypt(raw + bytes([pad]) * pad)
    return format(int.from_bytes(data, "big", signed=True), "x")


# ------------------------------------------------------------------------------------- Blowfish

_WORDS = 18 + 4 * 256  # P-array and four S-boxes, 32-bit words of pi's fraction
_pi_words: tuple[int, ...] | None = None


def _pi_fraction_words() -> tuple[int, ...]:
    """The first `_WORDS` 32-bit words of pi's fractional part (Machin's formula in integers)."""
    global _pi_words
    if _pi_words is None:
        bits = 32 * _WORDS + 64  # guard bits
        one = 1 << bits

        def arctan_inverse(x: int) -> int:
            total = term = one // x
            x2, n, sign = x * x, 1, -1
            while term:
                term //= x2
                n += 2
                total += sign * (term // n)
                sign = -sign
            return total

        pi = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)
        fraction = (pi - 3 * one) >> 64  # drop the guard bits
        _pi_words = tuple((fraction >> (32 * (_WORDS - 1 - i))) & 0xFFFFFFFF for i in range(_WORDS))
    return _pi_words


class _Blowfish:
    def __init__(self, key: bytes) -> None:
        if not 1 <= len(key) <= 56:
            raise MaskError("a Blowfish key of 1 to 56 bytes")
        words = _pi_fraction_words()
        self.p = list(words[:18])
        self.s = [list(words[18 + 256 * i : 18 + 256 * (i + 1)]) for i in range(4)]
        stream = (key * (72 // len(key) + 1))[:72]
        for i in range(18):
            self.p[i] ^= struct.unpack(">I", stream[4 * i : 4 * i + 4])[0]
        left = right = 0
        for i in range(0, 18, 2):
            left, right = self._encrypt_block(left, right)
            self.p[i], self.p[i + 1] = left, right
        for box in self.s:
            for i in range(0, 256, 2):
                left, right = self._encrypt_block(left, right)
                box[i], box[i + 1] = left, right

    def _f(self, x: int) -> int:
        s0, s1, s2, s3 = self.s
        h = (s0[x >> 24] + s1[(x >> 16) & 0xFF]) & 0xFFFFFFFF
        return ((h ^ s2[(x >> 8) & 0xFF]) + s3[x & 0xFF]) & 0xFFFFFFFF

    def _encrypt_block(self, left: int, right: int) -> tuple[int, int]:
        p = self.p
        for i in range(16):
            left ^= p[i]
            right ^= self._f(left)
            left, right = right, left
        left, right = right, left
        return left ^ p[17], right ^ p[16]

    def _decrypt_block(self, left: int, right: int) -> tuple[int, int]:
        p = self.p
        for i in range(17, 1, -1):
            left ^= p[i]
            right ^= self._f(left)
            left, right = right, left
        left, right = right, left
        return left ^ p[0], right ^ p[1]

    def encrypt(self, data: bytes) -> bytes:
        out = bytearray()
        for i in range(0, len(data), 8):
            out += struct.pack(">II", *self._encrypt_block(*struct.unpack(">II", data[i : i + 8])))
        return bytes(out)

    def decrypt(self, data: bytes) -> bytes:
        out = bytearray()
        for i in range(0, len(data), 8):
            out += struct.pack(">II", *self._decrypt_block(*struct.unpack(">II", data[i : i + 8])))
        return bytes(out)
