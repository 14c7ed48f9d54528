//! The records of an uncompressed batch (or of a compressed one, once
//! decompressed): each is
//!
//! ```text
//! length varint          bytes after this field
//! attributes i8          unused (0)
//! timestampDelta varlong from the batch's baseTimestamp
//! offsetDelta varint     from the batch's baseOffset: its index
//! keyLength varint, key  -1: no key
//! valueLength varint, value   -1: no value (a tombstone)
//! headerCount varint, headers: keyLength varint, key (UTF-8), valueLength varint, value
//! ```
//!
//! Parsing borrows: no byte is copied, nothing is allocated (a record's
//! headers are checked when it is read and walked again when asked for).

use super::varint::{read_varint, read_varlong};

/// One record, borrowed from its batch's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// From the batch's baseTimestamp (ms).
    pub timestamp_delta: i64,
    /// From the batch's baseOffset.
    pub offset_delta: i32,
    /// `None`: no key.
    pub key: Option<&'a [u8]>,
    /// `None`: a tombstone.
    pub value: Option<&'a [u8]>,
    /// Headers in order.
    pub headers: Headers<'a>,
}

/// A record's headers, as stored: checked when the record was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Headers<'a> {
    bytes: &'a [u8],
    count: usize,
}

impl<'a> Headers<'a> {
    /// How many.
    pub fn len(&self) -> usize {
        self.count
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Each header's key and value (`None`: no value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        let mut cursor = Cursor {
            bytes: self.bytes,
            at: 0,
        };
        let mut left = self.count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            // Read once already: these cannot fail.
            let key = cursor.nullable("header key").ok()??;
            let key = std::str::from_utf8(key).ok()?;
            let value = cursor.nullable("header value").ok()?;
            Some((key, value))
        })
    }

    /// The headers, collected.
    pub fn to_vec(&self) -> Vec<(&'a str, Option<&'a [u8]>)> {
        self.iter().collect()
    }

    /// The headers, copied (no allocation when there are none).
    pub fn to_owned_vec(&self) -> OwnedHeaders {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec)))
            .collect()
    }
}

/// Headers copied out of their batch: key, value (`None`: no value).
pub type OwnedHeaders = Vec<(String, Option<Vec<u8>>)>;

impl Headers<'_> {}

/// Why record bytes do not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A varint runs past the record or is too long.
    #[error("a malformed or cut {0} varint")]
    Varint(&'static str),
    /// A length below -1 (or below 0 where none may be absent), or past
    /// the record's end.
    #[error("{field} length {length} does not fit the record")]
    Length {
        /// Which field.
        field: &'static str,
        /// Its length.
        length: i32,
    },
    /// A header key that is not UTF-8.
    #[error("a header key is not UTF-8")]
    HeaderKey,
    /// Bytes left inside the record after its headers.
    #[error("{0} bytes after the record's headers")]
    Trailing(usize),
    /// offsetDelta is not the record's index.
    #[error("offsetDelta {found}, not its index {index}")]
    OffsetDelta {
        /// The record's index.
        index: i32,
        /// Its offsetDelta.
        found: i32,
    },
}

/// Reads the record at the start of `bytes`: it, and the bytes it took.
pub fn read_record(bytes: &[u8]) -> Result<(Record<'_>, usize), RecordError> {
    let (length, at) = read_varint(bytes).ok_or(RecordError::Varint("record length"))?;
    let end = usize::try_from(length)
        .ok()
        .and_then(|l| at.checked_add(l))
        .filter(|&end| end <= bytes.len())
        .ok_or(RecordError::Length {
            field: "record",
            length,
        })?;
    let mut cursor = Cursor {
        bytes: &bytes[..end],
        at,
    };
    let _attributes = cursor.take(1, "attributes")?;
    let timestamp_delta = cursor.varlong("timestampDelta")?;
    let offset_delta = cursor.varint("offsetDelta")?;
    let key = cursor.nullable("key")?;
    let value = cursor.nullable("value")?;
    let count = cursor.varint("headerCount")?;
    let count = usize::try_from(count).map_err(|_| RecordError::Length {
        field: "headers",
        length: count,
    })?;
    // Each header takes at least two bytes: a count past that is a lie.
    if count > (end - cursor.at) / 2 {
        return Err(RecordError::Length {
            field: "headers",
            length: count as i32,
        });
    }
    let headers_at = cursor.at;
    for _ in 0..count {
        let key = cursor.nullable("header key")?.ok_or(RecordError::Length {
            field: "header key",
            length: -1,
        })?;
        std::str::from_utf8(key).map_err(|_| RecordError::HeaderKey)?;
        cursor.nullable("header value")?;
    }
    let headers = Headers {
        bytes: &bytes[headers_at..cursor.at],
        count,
    };
    if cursor.at != end {
        return Err(RecordError::Trailing(end - cursor.at));
    }
    Ok((
        Record {
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        },
        end,
    ))
}

/// Walks `count` records in `bytes` (a batch's records, uncompressed) and
/// checks each one parses and has offsetDelta = its index — without
/// building it: the produce path's per-record cost (design record 0015).
/// Returns how many parsed and the bytes left after them; the first bad
/// record's index and problem.
pub fn check_records(bytes: &[u8], count: i32) -> Result<(i32, usize), (i32, RecordError)> {
    let mut at = 0;
    let mut index = 0;
    while index < count && at < bytes.len() {
        at += skip_record(&bytes[at..], index).map_err(|e| (index, e))?;
        index += 1;
    }
    Ok((index, bytes.len() - at))
}

/// The bytes the record at the start of `bytes` takes, checked as
/// [`read_record`] does (header keys need not be UTF-8 here: Kafka's
/// broker does not look), with offsetDelta = `index`.
fn skip_record(bytes: &[u8], index: i32) -> Result<usize, RecordError> {
    let (length, at) = read_varint(bytes).ok_or(RecordError::Varint("record length"))?;
    let end = usize::try_from(length)
        .ok()
        .and_then(|l| at.checked_add(l))
        .filter(|&end| end <= bytes.len())
        .ok_or(RecordError::Length {
            field: "record",
            length,
        })?;
    let record = &bytes[..end];
    // Attributes, then the timestamp delta (a varlong).
    let mut at = at + 1;
    let (_, len) = read_varlong(record.get(at..).unwrap_or_default())
        .ok_or(RecordError::Varint("timestampDelta"))?;
    at += len;
    let (offset_delta, len) = read_varint(record.get(at..).unwrap_or_default())
        .ok_or(RecordError::Varint("offsetDelta"))?;
    if offset_delta != index {
        return Err(RecordError::OffsetDelta {
            index,
            found: offset_delta,
        });
    }
    at += len;
    at = skip_field(record, at, "key", true)?;
    at = skip_field(record, at, "value", true)?;
    let (headers, len) = read_varint(record.get(at..).unwrap_or_default())
        .ok_or(RecordError::Varint("headerCount"))?;
    if headers < 0 {
        return Err(RecordError::Length {
            field: "headers",
            length: headers,
        });
    }
    at += len;
    for _ in 0..headers {
        at = skip_field(record, at, "header key", false)?;
        at = skip_field(record, at, "header value", true)?;
    }
    if at != end {
        return Err(RecordError::Trailing(end.saturating_sub(at)));
    }
    Ok(end)
}

/// Skips a length-prefixed field at `at` in `record` (-1: absent, if
/// `nullable`); where the next field starts.
fn skip_field(
    record: &[u8],
    at: usize,
    field: &'static str,
    nullable: bool,
) -> Result<usize, RecordError> {
    let (length, len) =
        read_varint(record.get(at..).unwrap_or_default()).ok_or(RecordError::Varint(field))?;
    let start = at + len;
    match usize::try_from(length) {
        Ok(n) if n <= record.len() - start => Ok(start + n),
        Err(_) if length == -1 && nullable => Ok(start),
        _ => Err(RecordError::Length { field, length }),
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RecordError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(RecordError::Length {
                field,
                length: n as i32,
            })?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn varint(&mut self, field: &'static str) -> Result<i32, RecordError> {
        let (value, len) = read_varint(&self.bytes[self.at..]).ok_or(RecordError::Varint(field))?;
        self.at += len;
        Ok(value)
    }

    fn varlong(&mut self, field: &'static str) -> Result<i64, RecordError> {
        let (value, len) =
            read_varlong(&self.bytes[self.at..]).ok_or(RecordError::Varint(field))?;
        self.at += len;
        Ok(value)
    }

    /// A length-prefixed field; -1 is absent.
    fn nullable(&mut self, field: &'static str) -> Result<Option<&'a [u8]>, RecordError> {
        let length = self.varint(field)?;
        match usize::try_from(length) {
            Ok(n) => self.take(n, field).map(Some),
            Err(_) if length == -1 => Ok(None),
            Err(_) => Err(RecordError::Length { field, length }),
        }
    }
}
