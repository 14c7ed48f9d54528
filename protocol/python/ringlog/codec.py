"""Frames and messages, byte for byte as PROTOCOL.md sections 1 and 4 say.

Frame::

    frame_len u32 LE   bytes after this field
    api       u16 LE
    version   u16 LE   0 in requests; the error code in responses
    request   u32 LE   request id, echoed in the response
    header    u32 LE   length of the flatbuffer header that follows
    header bytes, then payload bytes (the rest of the frame)

Message (the paper's format, the same on the wire and on disk)::

    length    u32 LE   bytes after this field (5 + body)
    magic     u8       high nibble 1; low nibble attributes (0x01 = keyed)
    crc       u32 LE   CRC-32 (IEEE) of the magic byte and the body
    body               value, or u16 LE key length + key + value when keyed
"""

from __future__ import annotations

import struct
import zlib
from typing import List, NamedTuple, Optional, Tuple

from .errors import CorruptMessage

PREFIX = struct.Struct("<IHHII")
PREFIX_BYTES = PREFIX.size  # 16
# A throttled answer's throttle time, right after the prefix (PROTOCOL.md §1).
THROTTLE = struct.Struct("<I")
THROTTLE_BYTES = THROTTLE.size
PROTOCOL_VERSION = 1
API_VERSION = 0
MAGIC = 1
ATTR_KEYED = 0x01
MESSAGE_HEADER_BYTES = 9
MESSAGE_BYTES_MAX = 16 * 1024 * 1024


class Api:
    """Api numbers (PROTOCOL.md section 3)."""

    HANDSHAKE = 0
    METADATA = 1
    CREATE_TOPIC = 2
    DELETE_TOPIC = 3
    PRODUCE = 4
    FETCH = 5
    LIST_OFFSETS = 6
    CREATE_PARTITIONS = 18
    AUTHENTICATE = 20
    CREATE_ACLS = 21
    DELETE_ACLS = 22
    DESCRIBE_ACLS = 23
    ALTER_USERS = 24
    LIST_USERS = 25
    INIT_PRODUCER_ID = 26
    ALTER_TOPIC_CONFIG = 31
    ALTER_QUOTAS = 32
    DESCRIBE_QUOTAS = 33


def frame(api: int, request_id: int, header: bytes, payload: bytes = b"") -> bytes:
    """A whole request frame."""
    frame_len = PREFIX_BYTES - 4 + len(header) + len(payload)
    return PREFIX.pack(frame_len, api, API_VERSION, request_id, len(header)) + header + payload


def parse_prefix(prefix: bytes) -> Tuple[int, int, int, int, int]:
    """(frame bytes after the prefix, api, error, request id, header length)."""
    frame_len, api, error, request_id, header_len = PREFIX.unpack(prefix)
    rest = frame_len + 4 - PREFIX_BYTES
    if rest < 0 or header_len > rest:
        raise ValueError(f"malformed frame prefix (frame_len {frame_len}, header_len {header_len})")
    return rest, api, error, request_id, header_len


def encode_message(value: bytes, key: Optional[bytes] = None) -> bytes:
    """One message in the stored format."""
    if key is None:
        magic = MAGIC << 4
        body = bytes(value)
    else:
        if len(key) > 0xFFFF:
            raise ValueError(f"a key is at most 65535 bytes, got {len(key)}")
        magic = (MAGIC << 4) | ATTR_KEYED
        body = struct.pack("<H", len(key)) + bytes(key) + bytes(value)
    crc = zlib.crc32(bytes([magic]) + body)
    return struct.pack("<IBI", 5 + len(body), magic, crc) + body


def fnv1a(data: bytes) -> int:
    """64-bit FNV-1a: the key hash of PROTOCOL.md's partitioner."""
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition a keyed message goes to: ``fnv1a(key) % partitions``."""
    return fnv1a(key) % partitions


class Message(NamedTuple):
    """A consumed message: its offset (byte position), key and value; on a
    topic of message format 2 also its time (ms since the Unix epoch) and
    headers ``(key, value or None)``."""

    offset: int
    key: Optional[bytes]
    value: bytes
    timestamp: Optional[int] = None
    headers: Tuple[Tuple[str, Optional[bytes]], ...] = ()


def decode_messages(chunk: bytes, offset: int) -> Tuple[List[Message], int]:
    """Whole messages at the front of ``chunk`` (which starts at ``offset``).

    Returns the messages and the offset just past the last whole one; a
    message cut off by the end of the chunk is left for the next fetch.
    Raises :class:`CorruptMessage` for a message that is whole but invalid.
    """
    out = []
    pos = 0
    view = memoryview(chunk)
    end = len(chunk)
    while end - pos >= 4:
        (length,) = struct.unpack_from("<I", chunk, pos)
        if length < 5 or length + 4 > MESSAGE_BYTES_MAX:
            raise CorruptMessage(offset + pos, f"invalid length {length}")
        if end - pos < 4 + length:
            break
        magic, crc = struct.unpack_from("<BI", chunk, pos + 4)
        if magic >> 4 != MAGIC or magic & 0x0F & ~ATTR_KEYED:
            raise CorruptMessage(offset + pos, f"unknown magic/attributes byte {magic:#04x}")
        body = view[pos + MESSAGE_HEADER_BYTES : pos + 4 + length]
        computed = zlib.crc32(body, zlib.crc32(bytes([magic])))
        if computed != crc:
            raise CorruptMessage(offset + pos, f"CRC mismatch (stored {crc:#010x}, computed {computed:#010x})")
        if magic & ATTR_KEYED:
            if len(body) < 2:
                raise CorruptMessage(offset + pos, "keyed message without a key length")
            (key_len,) = struct.unpack_from("<H", body, 0)
            if 2 + key_len > len(body):
                raise CorruptMessage(offset + pos, "key longer than the body")
            key = bytes(body[2 : 2 + key_len])
            value = bytes(body[2 + key_len :])
        else:
            key = None
            value = bytes(body)
        out.append(Message(offset + pos, key, value))
        pos += 4 + length
    return out, offset + pos
