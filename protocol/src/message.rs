//! The paper's message format: identical on the wire and on disk.
//!
//! ```text
//! offset  size  field
//! 0       4     length      u32 LE: bytes after this field (5 + body length)
//! 4       1     magic_attr  high nibble: magic (1); low nibble: attributes
//! 5       4     crc32       u32 LE: CRC-32 (IEEE) of magic_attr followed by body
//! 9       n     body        the payload; when KEYED: u16 LE key length, key, value
//! ```
//!
//! A plain message costs 9 bytes beyond its payload, as in the paper. A keyed
//! message adds 2 bytes plus the key. The CRC covers the attributes so a flipped
//! flag is detected, and each message is checkable on its own. A message's
//! offset is its byte position in the partition; the next message's offset is
//! `offset + 4 + length`.

/// Bytes of framing before the body: length (4) + magic/attributes (1) + CRC (4).
pub const MESSAGE_HEADER_BYTES: usize = 9;
/// The current magic, stored in the high nibble of byte 4.
pub const MAGIC: u8 = 1;
/// Attribute bit: the body starts with a u16 LE key length and the key.
pub const ATTR_KEYED: u8 = 0x01;
/// Attribute bits this version knows; others make a message invalid.
pub const ATTR_KNOWN: u8 = ATTR_KEYED;
/// The hard upper bound on one message's stored size (length field + 4).
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The longest key a keyed message can carry.
pub const KEY_BYTES_MAX: usize = u16::MAX as usize;

/// Why bytes are not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The length field is below the 5-byte minimum or above the limit.
    #[error("message at position {position} has invalid length {length}")]
    BadLength {
        /// Byte position within the set.
        position: usize,
        /// The length field's value.
        length: u32,
    },
    /// Unknown magic or attribute bits.
    #[error("message at position {position} has unknown magic/attributes byte {byte:#04x}")]
    BadMagic {
        /// Byte position within the set.
        position: usize,
        /// The byte found.
        byte: u8,
    },
    /// The stored CRC does not match the bytes.
    #[error("message at position {position} fails its CRC (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch {
        /// Byte position within the set.
        position: usize,
        /// The CRC in the message.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A keyed message whose key length runs past its body.
    #[error("message at position {position} has a key longer than its body")]
    BadKey {
        /// Byte position within the set.
        position: usize,
    },
    /// The set ends in the middle of a message (only an error where whole
    /// messages are required, as in a produce request).
    #[error("message set ends mid-message at position {position} ({missing} bytes missing)")]
    Incomplete {
        /// Where the incomplete message starts.
        position: usize,
        /// Bytes needed to complete it (at least 1).
        missing: usize,
    },
}

/// Appends one message to `out` in the stored format.
///
/// Panics if the key is longer than [`KEY_BYTES_MAX`] or the message would exceed
/// [`MESSAGE_BYTES_MAX`]; callers check sizes first (see [`encoded_len`]).
pub fn encode_message(out: &mut Vec<u8>, key: Option<&[u8]>, value: &[u8]) {
    let body_len = encoded_len(key, value) - MESSAGE_HEADER_BYTES;
    assert!(
        encoded_len(key, value) <= MESSAGE_BYTES_MAX,
        "message too large"
    );
    let attributes = if key.is_some() { ATTR_KEYED } else { 0 };
    let magic_attr = (MAGIC << 4) | attributes;
    let start = out.len();
    out.reserve(MESSAGE_HEADER_BYTES + body_len);
    out.extend_from_slice(&((5 + body_len) as u32).to_le_bytes());
    out.push(magic_attr);
    out.extend_from_slice(&[0; 4]);
    let body_start = out.len();
    if let Some(key) = key {
        assert!(key.len() <= KEY_BYTES_MAX, "key too long");
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key);
    }
    out.extend_from_slice(value);
    let crc = message_crc(magic_attr, &out[body_start..]);
    out[start + 5..start + 9].copy_from_slice(&crc.to_le_bytes());
}

/// The stored size of a message with this key and value.
pub fn encoded_len(key: Option<&[u8]>, value: &[u8]) -> usize {
    MESSAGE_HEADER_BYTES + key.map_or(0, |k| 2 + k.len()) + value.len()
}

/// CRC-32 of the magic/attributes byte followed by the body.
pub fn message_crc(magic_attr: u8, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[magic_attr]);
    hasher.update(body);
    hasher.finalize()
}

/// One decoded message, borrowing from its message set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The message's offset (its logical byte position in the partition).
    pub offset: u64,
    /// The key, when the message is keyed.
    pub key: Option<&'a [u8]>,
    /// The payload.
    pub value: &'a [u8],
    /// Stored size: 4 + the length field. `offset + stored_len` is the next offset.
    /// (A format-2 record: to the next record's offset, or for a batch's
    /// last record to the batch's end.)
    pub stored_len: usize,
    /// Format 2: its time (ms; the producer's or the broker's, as the
    /// topic says). Format 1 messages carry none.
    pub timestamp: Option<i64>,
    /// Format 2: its headers (format 1: none).
    pub headers: crate::batch::records::Headers<'a>,
}

impl Message<'_> {
    /// The offset of the message after this one.
    pub fn next_offset(&self) -> u64 {
        self.offset + self.stored_len as u64
    }
}

/// Iterates over the messages in a chunk of log bytes that starts at a message
/// boundary whose offset is `base_offset`.
///
/// Stops (returns `None`) at the end or at the first incomplete message; then
/// [`MessageSetIter::position`] is where the incomplete message starts, so a
/// consumer resumes there. A malformed message yields one `Err` and ends the
/// iteration.
#[derive(Debug, Clone)]
pub struct MessageSetIter<'a> {
    bytes: &'a [u8],
    base_offset: u64,
    position: usize,
    failed: bool,
}

impl<'a> MessageSetIter<'a> {
    /// Starts iterating `bytes`, whose first byte is at `base_offset`.
    pub fn new(bytes: &'a [u8], base_offset: u64) -> Self {
        MessageSetIter {
            bytes,
            base_offset,
            position: 0,
            failed: false,
        }
    }

    /// Bytes consumed by whole messages so far.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The offset to resume from: the first message not yet returned.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + self.position as u64
    }

    /// When the iteration stopped at an incomplete message: its declared stored
    /// size (4 + length) and how many of its bytes are present.
    pub fn incomplete(&self) -> Option<(usize, usize)> {
        let rest = self.bytes.get(self.position..)?;
        if rest.is_empty() || self.failed {
            return None;
        }
        match rest.get(0..4) {
            Some(len) => {
                let length = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
                Some((4 + length, rest.len()))
            }
            None => Some((4, rest.len())),
        }
    }
}

impl<'a> Iterator for MessageSetIter<'a> {
    type Item = Result<Message<'a>, MessageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let position = self.position;
        let rest = self.bytes.get(position..)?;
        match decode_message(rest, position) {
            Ok(Some((key, value, stored_len))) => {
                self.position += stored_len;
                Some(Ok(Message {
                    offset: self.base_offset + position as u64,
                    key,
                    value,
                    stored_len,
                    timestamp: None,
                    headers: Default::default(),
                }))
            }
            Ok(None) => None,
            Err(error) => {
                self.failed = true;
                Some(Err(error))
            }
        }
    }
}

/// The parts of one decoded message: key, value, stored length.
type Decoded<'a> = (Option<&'a [u8]>, &'a [u8], usize);

/// Decodes the message at the start of `rest`; `Ok(None)` when incomplete.
fn decode_message(rest: &[u8], position: usize) -> Result<Option<Decoded<'_>>, MessageError> {
    let Some(header) = rest.get(..MESSAGE_HEADER_BYTES) else {
        // Too short for a header. A length field already visible can still be
        // judged, so a garbage prefix is reported rather than waited for.
        if let Some(len) = rest.get(..4) {
            let length = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
            check_length(length, position)?;
        }
        return Ok(None);
    };
    let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    check_length(length, position)?;
    let magic_attr = header[4];
    if magic_attr >> 4 != MAGIC || magic_attr & 0x0f & !ATTR_KNOWN != 0 {
        return Err(MessageError::BadMagic {
            position,
            byte: magic_attr,
        });
    }
    let stored_len = 4 + length as usize;
    let Some(body) = rest.get(MESSAGE_HEADER_BYTES..stored_len) else {
        return Ok(None);
    };
    let stored = u32::from_le_bytes([header[5], header[6], header[7], header[8]]);
    let computed = message_crc(magic_attr, body);
    if stored != computed {
        return Err(MessageError::CrcMismatch {
            position,
            stored,
            computed,
        });
    }
    if magic_attr & ATTR_KEYED != 0 {
        let key_len = match body.get(..2) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as usize,
            None => return Err(MessageError::BadKey { position }),
        };
        let key = body
            .get(2..2 + key_len)
            .ok_or(MessageError::BadKey { position })?;
        let value = body.get(2 + key_len..).unwrap_or_default();
        Ok(Some((Some(key), value, stored_len)))
    } else {
        Ok(Some((None, body, stored_len)))
    }
}

fn check_length(length: u32, position: usize) -> Result<(), MessageError> {
    if length < 5 || length as usize + 4 > MESSAGE_BYTES_MAX {
        return Err(MessageError::BadLength { position, length });
    }
    Ok(())
}

/// The whole messages at the start of `bytes`, judged by their length
/// fields and magic bytes only: their byte length and count. For a copier
/// that hands the bytes on to a broker, which checks every CRC itself (a
/// mirror), so the bytes are not hashed twice. A length or magic byte that
/// cannot be a message's is an error, as in [`MessageSetIter`].
pub fn whole_messages(bytes: &[u8]) -> Result<(usize, u32), MessageError> {
    let mut position = 0usize;
    let mut count = 0u32;
    while let Some(header) = bytes.get(position..position + MESSAGE_HEADER_BYTES) {
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        check_length(length, position)?;
        let magic_attr = header[4];
        if magic_attr >> 4 != MAGIC || magic_attr & 0x0f & !ATTR_KNOWN != 0 {
            return Err(MessageError::BadMagic {
                position,
                byte: magic_attr,
            });
        }
        let end = position + 4 + length as usize;
        if end > bytes.len() {
            break;
        }
        position = end;
        count += 1;
    }
    Ok((position, count))
}

/// What a whole, valid message set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageSetSummary {
    /// Number of messages.
    pub count: u32,
    /// The largest stored message size.
    pub largest_bytes: usize,
}

/// Checks that `bytes` is a sequence of whole, valid messages (every length,
/// magic and CRC), as a produce request must be. An empty set is invalid.
pub fn validate_message_set(bytes: &[u8]) -> Result<MessageSetSummary, MessageError> {
    let mut iter = MessageSetIter::new(bytes, 0);
    let mut count = 0u32;
    let mut largest_bytes = 0;
    for message in iter.by_ref() {
        let message = message?;
        count += 1;
        largest_bytes = largest_bytes.max(message.stored_len);
    }
    if iter.position() != bytes.len() || count == 0 {
        let missing = iter
            .incomplete()
            .map_or(MESSAGE_HEADER_BYTES, |(need, have)| {
                need.saturating_sub(have).max(1)
            });
        return Err(MessageError::Incomplete {
            position: iter.position(),
            missing,
        });
    }
    Ok(MessageSetSummary {
        count,
        largest_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_finds_the_iterators_boundaries_without_hashing() {
        let mut set = Vec::new();
        for n in 0..20u32 {
            let value = vec![n as u8; 1 + n as usize * 7];
            let key = (n % 3 == 0).then_some(&b"k"[..]);
            encode_message(&mut set, key, &value);
        }
        for cut in [0, 5, 9, 10, set.len() / 2, set.len() - 1, set.len()] {
            let bytes = &set[..cut];
            let mut iter = MessageSetIter::new(bytes, 0);
            let count = iter
                .by_ref()
                .inspect(|m| assert!(m.is_ok(), "{m:?}"))
                .count() as u32;
            assert_eq!(
                whole_messages(bytes).unwrap(),
                (iter.position(), count),
                "cut at {cut}"
            );
        }
        // A bad CRC is the receiving broker's to find; a length or magic
        // byte that no message has is found here.
        let mut flipped = set.clone();
        flipped[12] ^= 0xff;
        assert_eq!(whole_messages(&flipped).unwrap().1, 20);
        let mut garbage = set.clone();
        garbage[4] = 0x77;
        let refused = whole_messages(&garbage).unwrap_err();
        assert!(
            matches!(refused, MessageError::BadMagic { position: 0, .. }),
            "{refused:?}"
        );
        let refused = whole_messages(&[0, 0, 0, 0, 0x10, 0, 0, 0, 0]).unwrap_err();
        assert!(
            matches!(refused, MessageError::BadLength { .. }),
            "{refused:?}"
        );
    }

    #[test]
    fn plain_message_costs_nine_bytes() {
        let mut out = Vec::new();
        encode_message(&mut out, None, &[7u8; 200]);
        assert_eq!(out.len(), 209);
        assert_eq!(out[4], MAGIC << 4);
    }

    #[test]
    fn messages_round_trip_with_offsets_as_byte_positions() {
        let mut out = Vec::new();
        encode_message(&mut out, None, b"hello");
        encode_message(&mut out, Some(b"k"), b"world");
        encode_message(&mut out, None, b"");
        let got: Vec<_> = MessageSetIter::new(&out, 1000)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].offset, 1000);
        assert_eq!(got[0].value, b"hello");
        assert_eq!(got[0].key, None);
        assert_eq!(got[1].offset, 1000 + 14);
        assert_eq!(got[1].key, Some(&b"k"[..]));
        assert_eq!(got[1].value, b"world");
        assert_eq!(got[2].offset, got[1].next_offset());
        assert_eq!(got[2].next_offset(), 1000 + out.len() as u64);
        assert_eq!(
            validate_message_set(&out),
            Ok(MessageSetSummary {
                count: 3,
                largest_bytes: 17
            })
        );
    }

    #[test]
    fn iteration_stops_at_an_incomplete_message() {
        let mut out = Vec::new();
        encode_message(&mut out, None, b"first");
        encode_message(&mut out, None, b"second");
        for cut in 1..out.len() {
            let chunk = &out[..cut];
            let mut iter = MessageSetIter::new(chunk, 0);
            let whole: Vec<_> = iter.by_ref().collect::<Result<_, _>>().unwrap();
            let expect = if cut >= 14 { 1 } else { 0 };
            assert_eq!(whole.len(), expect, "cut at {cut}");
            assert_eq!(iter.position(), if expect == 1 { 14 } else { 0 });
            if cut == 14 {
                assert_eq!(iter.incomplete(), None);
                assert!(validate_message_set(chunk).is_ok());
            } else {
                assert!(iter.incomplete().is_some());
                assert!(matches!(
                    validate_message_set(chunk),
                    Err(MessageError::Incomplete { .. })
                ));
            }
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut out = Vec::new();
        encode_message(&mut out, Some(b"key"), b"payload");
        for byte in 4..out.len() {
            let mut bad = out.clone();
            bad[byte] ^= 0x10;
            assert!(validate_message_set(&bad).is_err(), "byte {byte}");
        }
    }

    #[test]
    fn garbage_lengths_are_rejected_not_waited_for() {
        assert!(matches!(
            validate_message_set(&[0xff, 0xff, 0xff, 0xff]),
            Err(MessageError::BadLength { .. })
        ));
        assert!(matches!(
            validate_message_set(&[1, 0, 0, 0, 0x10, 0, 0, 0, 0]),
            Err(MessageError::BadLength { length: 1, .. })
        ));
        assert!(matches!(
            validate_message_set(&[]),
            Err(MessageError::Incomplete { .. })
        ));
    }
}
