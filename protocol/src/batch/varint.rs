//! Kafka's variable-length integers in records: zig-zag encoded (small
//! magnitudes of either sign are short), then 7 bits a byte, low first,
//! the high bit set on every byte but the last. A varint takes at most 5
//! bytes, a varlong 10.

/// Reads a varint (i32) at the start of `bytes`: its value and its length;
/// `None` when it runs past the bytes or past 5 bytes.
#[inline]
pub fn read_varint(bytes: &[u8]) -> Option<(i32, usize)> {
    let (raw, len) = read_unsigned(bytes, 5)?;
    let raw = u32::try_from(raw).ok()?;
    Some((((raw >> 1) as i32) ^ -((raw & 1) as i32), len))
}

/// Reads a varlong (i64) at the start of `bytes`: its value and its
/// length; `None` when it runs past the bytes or past 10 bytes.
#[inline]
pub fn read_varlong(bytes: &[u8]) -> Option<(i64, usize)> {
    let (raw, len) = read_unsigned(bytes, 10)?;
    Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), len))
}

#[inline]
fn read_unsigned(bytes: &[u8], max_len: usize) -> Option<(u64, usize)> {
    // Most lengths and deltas in a batch fit one byte.
    if let Some(&b) = bytes.first() {
        if b & 0x80 == 0 {
            return Some((u64::from(b), 1));
        }
    }
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(max_len).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Appends `value` as a varint.
pub fn write_varint(out: &mut Vec<u8>, value: i32) {
    write_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

/// Appends `value` as a varlong.
pub fn write_varlong(out: &mut Vec<u8>, value: i64) {
    write_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn write_unsigned(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Bytes `value` takes as a varlong.
pub fn varlong_len(value: i64) -> usize {
    let raw = ((value << 1) ^ (value >> 63)) as u64;
    (64 - raw.max(1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes `value` takes as a varint.
pub fn varint_len(value: i32) -> usize {
    let raw = u64::from(((value << 1) ^ (value >> 31)) as u32);
    (64 - raw.max(1).leading_zeros() as usize).div_ceil(7)
}
