"""Message format 2: Kafka's record batch v2 at ringlog's byte offsets.

A producer writes each batch as Kafka's clients do (baseOffset 0, leader
epoch -1, ``lastOffsetDelta = recordCount - 1``, CRC-32C over attributes to
the end); the broker stamps its position, its leader epoch and
``lastOffsetDelta = size - 1``. A record's offset is its batch's position +
its offsetDelta; the offset after a batch is the next batch's position.
Layout and rules: ``broker/docs/design/0015-message-format-2.md``.

Codecs: gzip needs nothing beyond Python; snappy (xerial framing, as Kafka's
Java client writes it), lz4 (frame) and zstd need the ``cramjam`` package
(``pip install ringlog[codecs]``), and say so when it is missing.
"""

import struct
import zlib
from typing import List, NamedTuple, Optional, Sequence, Tuple

from .errors import RinglogError

HEADER_BYTES = 61
LOG_OVERHEAD = 12
MAGIC = 2
BATCH_BYTES_MAX = 16 * 1024 * 1024
#: The most a consumer decompresses of one batch (a small batch can claim
#: gigabytes).
RECORDS_BYTES_MAX = 64 * 1024 * 1024

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ATTR_CODEC = 0x07
ATTR_LOG_APPEND_TIME = 0x08

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_CHUNK = 32 * 1024

Header = Tuple[str, Optional[bytes]]


class Record(NamedTuple):
    """One record read from a batch."""

    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Tuple[Header, ...]


class BatchError(RinglogError):
    """Bytes that are not a stored batch, or records that do not read."""


# ---- CRC-32C (Castagnoli), as Kafka's batches carry it ----

def _crc32c_table() -> List[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()

try:  # the C implementation, when installed (pip install crc32c)
    from crc32c import crc32c as _fast_crc32c  # type: ignore
except ImportError:  # pragma: no cover - depends on the environment
    _fast_crc32c = None


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (the ``crc32c`` package's when installed)."""
    if _fast_crc32c is not None:
        return _fast_crc32c(data)
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---- varints (zigzag, as Kafka's records write them) ----

def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    v &= (1 << 64) - 1
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(data: bytes, at: int) -> Tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if at >= len(data) or shift > 63:
            raise BatchError("a malformed or cut varint")
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (value >> 1) ^ -(value & 1), at


def _field(out: bytearray, data: Optional[bytes]) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


# ---- codecs ----

def _cramjam(codec: str):
    try:
        import cramjam  # type: ignore
    except ImportError as e:
        raise RinglogError(
            f"{codec} needs the cramjam package: pip install 'ringlog[codecs]' (or cramjam)"
        ) from e
    return cramjam


def compress(codec: str, records: bytes) -> bytes:
    """``records`` compressed as Kafka's clients write ``codec``."""
    if codec == "none":
        return records
    if codec == "gzip":
        return zlib.compress(records, 6, wbits=31)
    cramjam = _cramjam(codec)
    if codec == "snappy":
        out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        for i in range(0, len(records), _XERIAL_CHUNK):
            block = bytes(cramjam.snappy.compress_raw(records[i:i + _XERIAL_CHUNK]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == "lz4":
        # A frame of independent 64 KiB blocks without checksums: what
        # Kafka's Java client writes and the only kind it reads. The frame
        # header is fixed (version 1, independent blocks; 64 KiB; its
        # checksum byte 0x82).
        out = bytearray(b"\x04\x22\x4d\x18\x60\x40\x82")
        for i in range(0, len(records), 64 * 1024):
            chunk = records[i:i + 64 * 1024]
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
            if len(block) >= len(chunk):
                out += struct.pack("<I", len(chunk) | 0x80000000) + chunk
            else:
                out += struct.pack("<I", len(block)) + block
        out += b"\x00\x00\x00\x00"
        return bytes(out)
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(records, level=3))
    raise ValueError(f"compression must be one of {sorted(CODECS)}, got {codec!r}")


def decompress(codec_bits: int, block: bytes, bytes_max: int = RECORDS_BYTES_MAX) -> bytes:
    """The records of a compressed block, at most ``bytes_max`` of them."""
    if codec_bits == 0:
        return block
    if codec_bits == 1:
        d = zlib.decompressobj(wbits=47)
        out = d.decompress(block, bytes_max + 1)
        if len(out) > bytes_max:
            raise BatchError(f"a gzip block decompresses past {bytes_max} bytes")
        return out
    names = {2: "snappy", 3: "lz4", 4: "zstd"}
    if codec_bits not in names:
        raise BatchError(f"compression codec {codec_bits} is not none, gzip, snappy, lz4 or zstd")
    cramjam = _cramjam(names[codec_bits])
    try:
        if codec_bits == 2:
            if not block.startswith(_XERIAL_MAGIC):
                out = bytes(cramjam.snappy.decompress_raw(block))
            else:
                parts, at = [], 16
                while at < len(block):
                    (n,) = struct.unpack_from(">i", block, at)
                    parts.append(bytes(cramjam.snappy.decompress_raw(block[at + 4:at + 4 + n])))
                    at += 4 + n
                out = b"".join(parts)
        elif codec_bits == 3:
            out = bytes(cramjam.lz4.decompress(block))
        else:
            out = bytes(cramjam.zstd.decompress(block))
    except Exception as e:  # the codec's own error
        raise BatchError(f"{names[codec_bits]} block does not decompress: {e}") from e
    if len(out) > bytes_max:
        raise BatchError(f"a {names[codec_bits]} block decompresses past {bytes_max} bytes")
    return out


# ---- writing ----

#: The numbers of a batch from a producer that is not idempotent.
NOT_NUMBERED = (-1, -1, -1)


def encode_batch(
    records: Sequence[Tuple[Optional[bytes], Optional[bytes], Sequence[Header], int]],
    compression: str = "none",
    producer: Tuple[int, int, int] = NOT_NUMBERED,
) -> bytes:
    """One batch of ``(key, value, headers, timestamp_ms)`` records, as a
    producer writes it (compressed unless that does not shrink it, or would
    pack more records than the batch has bytes). ``producer`` is an
    idempotent producer's ``(id, epoch, base sequence)``."""
    if not records:
        raise ValueError("a batch holds at least one record")
    if compression not in CODECS:
        raise ValueError(f"compression must be one of {sorted(CODECS)}, got {compression!r}")
    base = records[0][3]
    body = bytearray()
    record = bytearray()
    for i, (key, value, headers, timestamp) in enumerate(records):
        record.clear()
        record.append(0)
        _write_varint(record, timestamp - base)
        _write_varint(record, i)
        _field(record, key)
        _field(record, value)
        _write_varint(record, len(headers))
        for name, hvalue in headers:
            _field(record, name.encode())
            _field(record, hvalue)
        _write_varint(body, len(record))
        body += record
    plain = bytes(body)
    codec = CODECS[compression]
    block = compress(compression, plain)
    if codec and (len(block) >= len(plain) or HEADER_BYTES + len(block) < len(records)):
        codec, block = 0, plain
    count = len(records)
    top = max(r[3] for r in records)
    pid, epoch, sequence = producer
    after_crc = struct.pack(">hiqqqhii", codec, count - 1, base, top, pid, epoch, sequence, count) + block
    size = LOG_OVERHEAD + 9 + len(after_crc)
    head = struct.pack(">qiibI", 0, size - LOG_OVERHEAD, -1, MAGIC, crc32c(after_crc))
    return head + after_crc


def renumber(stored: bytes, producer: Tuple[int, int, int]) -> bytes:
    """A written batch with an idempotent producer's new ``(id, epoch, base
    sequence)`` (a partition starting afresh in a new epoch), CRC and all."""
    out = bytearray(stored)
    struct.pack_into(">qhi", out, 43, *producer)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def advance(sequence: int, count: int) -> int:
    """An idempotent producer's sequence moved on by ``count`` records
    (it wraps from 2**31 - 1 to 0)."""
    return (sequence + count) % (1 << 31)


# ---- reading ----

def _stored_header(chunk: bytes, at: int, offset: int) -> Tuple[int, int, int, int, int]:
    """Checks the stored batch at ``chunk[at:]`` (lying at ``offset``):
    returns its size, attributes, base timestamp, max timestamp, record
    count. A cut batch returns size 0 with the size it needs as the count."""
    if len(chunk) - at < HEADER_BYTES:
        return 0, 0, 0, 0, HEADER_BYTES
    base_offset, length, _epoch, magic, crc = struct.unpack_from(">qiibI", chunk, at)
    if magic != MAGIC:
        raise BatchError(f"batch at offset {offset}: magic {magic}, not 2")
    size = length + LOG_OVERHEAD
    if not HEADER_BYTES <= size <= BATCH_BYTES_MAX:
        raise BatchError(f"batch at offset {offset}: batchLength {length}")
    if len(chunk) - at < size:
        return 0, 0, 0, 0, size
    computed = crc32c(chunk[at + 21:at + size])
    if computed != crc:
        raise BatchError(f"batch at offset {offset}: CRC-32C mismatch (stored {crc:#010x}, computed {computed:#010x})")
    if base_offset != offset:
        raise BatchError(f"batch at offset {offset} names offset {base_offset}")
    attributes, last_delta, base_ts, max_ts = struct.unpack_from(">hiqq", chunk, at + 21)
    (count,) = struct.unpack_from(">i", chunk, at + 57)
    if last_delta != size - 1 or not 1 <= count <= size:
        raise BatchError(f"batch at offset {offset} of {size} bytes has lastOffsetDelta {last_delta} and {count} records")
    return size, attributes, base_ts, max_ts, count


def _records(data: bytes, count: int, offset: int, end: int, attributes: int, base_ts: int, max_ts: int) -> List[Record]:
    out = []
    at = 0
    last = -1
    for _ in range(count):
        length, at = _read_varint(data, at)
        stop = at + length
        if length < 0 or stop > len(data):
            raise BatchError(f"batch at offset {offset}: a record length {length} past its batch")
        at += 1  # attributes
        ts_delta, at = _read_varint(data, at)
        offset_delta, at = _read_varint(data, at)

        def nullable(at: int) -> Tuple[Optional[bytes], int]:
            n, at = _read_varint(data, at)
            if n == -1:
                return None, at
            if n < 0 or at + n > stop:
                raise BatchError(f"batch at offset {offset}: a field of {n} bytes past its record")
            return bytes(data[at:at + n]), at + n

        key, at = nullable(at)
        value, at = nullable(at)
        n_headers, at = _read_varint(data, at)
        headers = []
        for _ in range(max(n_headers, 0)):
            name, at = nullable(at)
            hvalue, at = nullable(at)
            headers.append(((name or b"").decode("utf-8", "replace"), hvalue))
        if at != stop:
            raise BatchError(f"batch at offset {offset}: {stop - at} bytes after a record's headers")
        record_offset = offset + offset_delta
        if not offset <= record_offset < end or record_offset <= last:
            raise BatchError(f"batch at offset {offset}: a record's offset {record_offset} outside its batch")
        last = record_offset
        timestamp = max_ts if attributes & ATTR_LOG_APPEND_TIME else base_ts + ts_delta
        out.append(Record(record_offset, timestamp, key, value, tuple(headers)))
    return out


def decode_batches(chunk: bytes, chunk_offset: int, position: int) -> Tuple[List[Record], int, int]:
    """The records of the whole stored batches at the front of ``chunk``
    (which starts at ``chunk_offset``), from ``position`` on; the offset
    after the last whole batch (``position`` if none); and when none was
    whole, the bytes the first batch needs (else 0)."""
    out: List[Record] = []
    at = 0
    view = bytes(chunk)
    while at < len(view):
        offset = chunk_offset + at
        size, attributes, base_ts, max_ts, count = _stored_header(view, at, offset)
        if size == 0:
            if at == 0:
                return out, position, count
            break
        data = decompress(attributes & ATTR_CODEC, view[at + HEADER_BYTES:at + size])
        for record in _records(data, count, offset, offset + size, attributes, base_ts, max_ts):
            if record.offset >= position:
                out.append(record)
        at += size
    return out, max(chunk_offset + at, position), 0
