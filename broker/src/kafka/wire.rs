//! Kafka's primitive types on the wire (big-endian integers, strings and
//! byte arrays with an `int16`/`int32` length, `-1` for null, arrays with
//! an `int32` count), read from a request and written into an answer.
//! A *flexible* reader or writer (KIP-482: the versions `versions.rs`
//! marks so) uses the compact forms instead — strings and arrays with an
//! `unsigned_varint` of length + 1, 0 for null — and knows tagged fields.
//! Only a few APIs are served at flexible versions yet (ApiVersions 3–4,
//! Metadata 9–12); the others stop before theirs.

use crate::reply::{Dispatched, Payload, Response};

/// A ready answer with `body`.
pub fn ready(api: i16, body: Vec<u8>) -> Dispatched {
    Dispatched::Ready(answer(api, body, Payload::None))
}

/// An answer with `body` and then `payload`.
pub fn answer(api: i16, body: Vec<u8>, payload: Payload) -> Response {
    Response {
        api: api as u16,
        error: 0,
        header: body,
        payload,
    }
}

/// A request that ends before what its version says it holds, or holds a
/// length no bytes back.
#[derive(Debug, thiserror::Error)]
#[error("malformed request: {what} at byte {at} of {len}")]
pub struct Malformed {
    /// The field being read.
    pub what: &'static str,
    /// Where in the request body.
    pub at: usize,
    /// The body's size.
    pub len: usize,
}

/// Reads one request body, field by field.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    flexible: bool,
}

/// Tagged fields one structure may carry: more is malformed (Kafka
/// defines a handful per structure).
const TAGGED_FIELDS_MAX: u32 = 64;

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            at: 0,
            flexible: false,
        }
    }

    /// A reader of a flexible version's body.
    pub fn flexible(bytes: &'a [u8]) -> Self {
        Reader {
            flexible: true,
            ..Reader::new(bytes)
        }
    }

    /// An `unsigned_varint` of at most 32 bits.
    pub fn unsigned_varint(&mut self, what: &'static str) -> Result<u32, Malformed> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1, what)?[0];
            if shift == 28 && byte > 0x0f {
                return Err(self.malformed(what));
            }
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed(what))
    }

    /// A flexible structure's tagged fields, skipped (none is used).
    pub fn tagged_fields(&mut self, what: &'static str) -> Result<(), Malformed> {
        let count = self.unsigned_varint(what)?;
        if count > TAGGED_FIELDS_MAX {
            return Err(self.malformed(what));
        }
        for _ in 0..count {
            self.unsigned_varint(what)?; // tag
            let size = self.unsigned_varint(what)?;
            self.take(size as usize, what)?;
        }
        Ok(())
    }

    /// A `uuid`.
    pub fn uuid(&mut self, what: &'static str) -> Result<[u8; 16], Malformed> {
        let mut id = [0u8; 16];
        id.copy_from_slice(self.take(16, what)?);
        Ok(id)
    }

    /// A flexible version's length or count: `None` for null (0).
    fn compact_length(&mut self, what: &'static str) -> Result<Option<usize>, Malformed> {
        Ok(match self.unsigned_varint(what)? {
            0 => None,
            n => Some(n as usize - 1),
        })
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn malformed(&self, what: &'static str) -> Malformed {
        Malformed {
            what,
            at: self.at,
            len: self.bytes.len(),
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if self.remaining() < n {
            return Err(self.malformed(what));
        }
        let taken = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(taken)
    }

    /// An `int8`.
    pub fn i8(&mut self, what: &'static str) -> Result<i8, Malformed> {
        Ok(self.take(1, what)?[0] as i8)
    }

    /// An `int16`.
    pub fn i16(&mut self, what: &'static str) -> Result<i16, Malformed> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    /// An `int32`.
    pub fn i32(&mut self, what: &'static str) -> Result<i32, Malformed> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An `int64`.
    pub fn i64(&mut self, what: &'static str) -> Result<i64, Malformed> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    /// A `boolean`.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, Malformed> {
        Ok(self.take(1, what)?[0] != 0)
    }

    /// A `nullable_string`: `None` for null; bytes that are not UTF-8 are
    /// malformed.
    pub fn nullable_string(&mut self, what: &'static str) -> Result<Option<&'a str>, Malformed> {
        let len = if self.flexible {
            match self.compact_length(what)? {
                None => return Ok(None),
                Some(len) => len,
            }
        } else {
            match self.i16(what)? {
                len if len < 0 => return Ok(None),
                len => len as usize,
            }
        };
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|_| self.malformed(what))
    }

    /// A `string` (null reads as empty).
    pub fn string(&mut self, what: &'static str) -> Result<&'a str, Malformed> {
        Ok(self.nullable_string(what)?.unwrap_or_default())
    }

    /// `nullable_bytes` / `records`: `None` for null.
    pub fn nullable_bytes(&mut self, what: &'static str) -> Result<Option<&'a [u8]>, Malformed> {
        let len = self.i32(what)?;
        if len < 0 {
            return Ok(None);
        }
        self.take(len as usize, what).map(Some)
    }

    /// An array's count: `None` for a null array. A count larger than the
    /// bytes left could hold (each element at least `element_min` bytes)
    /// is malformed, so no count makes the broker reserve memory the
    /// request does not carry.
    pub fn array(
        &mut self,
        element_min: usize,
        what: &'static str,
    ) -> Result<Option<usize>, Malformed> {
        let count = if self.flexible {
            match self.compact_length(what)? {
                None => return Ok(None),
                Some(count) => count,
            }
        } else {
            match self.i32(what)? {
                count if count < 0 => return Ok(None),
                count => count as usize,
            }
        };
        if count.saturating_mul(element_min.max(1)) > self.remaining() {
            return Err(self.malformed(what));
        }
        Ok(Some(count))
    }
}

/// Writes one answer body.
#[derive(Default)]
pub struct Writer {
    /// The bytes so far.
    pub out: Vec<u8>,
    flexible: bool,
}

impl Writer {
    /// A writer of a flexible version's answer. It begins with the
    /// response header's (empty) tagged fields — header v1 is the
    /// correlation id and those, and the correlation id is written by the
    /// connection — so it is not for ApiVersions, whose header is v0.
    pub fn flexible_answer() -> Self {
        let mut w = Writer {
            out: Vec::new(),
            flexible: true,
        };
        w.no_tagged_fields();
        w
    }

    /// A flexible structure's end: its (empty) tagged fields; nothing in a
    /// non-flexible version.
    pub fn end_struct(&mut self) {
        if self.flexible {
            self.no_tagged_fields();
        }
    }

    /// A `uuid`.
    pub fn uuid(&mut self, id: &[u8; 16]) {
        self.out.extend_from_slice(id);
    }

    /// An `int8`.
    pub fn i8(&mut self, v: i8) {
        self.out.push(v as u8);
    }

    /// An `int16`.
    pub fn i16(&mut self, v: i16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    /// An `int32`.
    pub fn i32(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    /// An `int64`.
    pub fn i64(&mut self, v: i64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    /// A `boolean`.
    pub fn bool(&mut self, v: bool) {
        self.out.push(u8::from(v));
    }

    /// A `string` (longer than `i16::MAX` bytes is cut: no name is).
    pub fn string(&mut self, v: &str) {
        let bytes = &v.as_bytes()[..v.len().min(i16::MAX as usize)];
        if self.flexible {
            self.unsigned_varint(bytes.len() as u32 + 1);
        } else {
            self.i16(bytes.len() as i16);
        }
        self.out.extend_from_slice(bytes);
    }

    /// A `nullable_string`.
    pub fn nullable_string(&mut self, v: Option<&str>) {
        match v {
            Some(v) => self.string(v),
            None if self.flexible => self.unsigned_varint(0),
            None => self.i16(-1),
        }
    }

    /// `bytes` (an `int32` length).
    pub fn bytes(&mut self, v: &[u8]) {
        self.i32(v.len() as i32);
        self.out.extend_from_slice(v);
    }

    /// An array's count.
    pub fn array(&mut self, count: usize) {
        if self.flexible {
            self.compact_array(count);
        } else {
            self.i32(count as i32);
        }
    }

    /// An `unsigned_varint` (flexible versions' lengths and counts).
    pub fn unsigned_varint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    /// A flexible version's `compact_array` count (count + 1; 0 is null).
    pub fn compact_array(&mut self, count: usize) {
        self.unsigned_varint(count as u32 + 1);
    }

    /// A flexible version's empty tagged-field section.
    pub fn no_tagged_fields(&mut self) {
        self.unsigned_varint(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_as_written_and_a_short_or_lying_request_is_malformed() {
        let mut w = Writer::default();
        w.i16(-2);
        w.i32(7);
        w.i64(-9);
        w.string("topic");
        w.nullable_string(None);
        w.array(2);
        w.i32(1);
        w.i32(2);
        let mut r = Reader::new(&w.out);
        assert_eq!(r.i16("a").unwrap(), -2);
        assert_eq!(r.i32("b").unwrap(), 7);
        assert_eq!(r.i64("c").unwrap(), -9);
        assert_eq!(r.string("d").unwrap(), "topic");
        assert_eq!(r.nullable_string("e").unwrap(), None);
        assert_eq!(r.array(4, "f").unwrap(), Some(2));
        assert_eq!((r.i32("g").unwrap(), r.i32("h").unwrap()), (1, 2));
        assert_eq!(r.remaining(), 0);
        let error = r.i8("past the end").unwrap_err();
        assert_eq!((error.what, error.at), ("past the end", w.out.len()));
        // A count of a billion elements in eight bytes: refused before
        // anything is reserved for it.
        let mut lying = Writer::default();
        lying.array(1_000_000_000);
        lying.i32(0);
        assert!(Reader::new(&lying.out).array(4, "topics").is_err());
        // A string whose length runs past the end.
        let mut short = Writer::default();
        short.i16(10);
        short.out.extend_from_slice(b"abc");
        assert!(Reader::new(&short.out).string("name").is_err());
    }

    #[test]
    fn unsigned_varints_are_seven_bits_a_byte_low_first() {
        let mut w = Writer::default();
        w.unsigned_varint(0);
        w.unsigned_varint(127);
        w.unsigned_varint(300);
        w.compact_array(2);
        w.no_tagged_fields();
        assert_eq!(w.out, [0, 127, 0xac, 0x02, 3, 0]);
        let mut r = Reader::flexible(&w.out);
        assert_eq!(r.unsigned_varint("a").unwrap(), 0);
        assert_eq!(r.unsigned_varint("b").unwrap(), 127);
        assert_eq!(r.unsigned_varint("c").unwrap(), 300);
        assert!(r.array(1, "d").is_err(), "2 elements in 1 byte left");
        // Five bytes of continuation, or a fifth byte past 32 bits: malformed.
        let long = [0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(Reader::new(&long).unsigned_varint("e").is_err());
        let max = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(Reader::new(&max).unsigned_varint("f").unwrap(), u32::MAX);
    }

    #[test]
    fn a_flexible_reader_reads_what_a_flexible_writer_wrote() {
        let mut w = Writer::flexible_answer();
        w.string("topic");
        w.nullable_string(None);
        w.array(2);
        w.uuid(&[7; 16]);
        w.end_struct();
        assert_eq!(w.out[0], 0, "the header's tagged fields come first");
        let mut r = Reader::flexible(&w.out[1..]);
        assert_eq!(r.string("name").unwrap(), "topic");
        assert_eq!(r.nullable_string("null").unwrap(), None);
        assert_eq!(r.unsigned_varint("count").unwrap(), 3);
        assert_eq!(r.uuid("id").unwrap(), [7; 16]);
        r.tagged_fields("tags").unwrap();
        assert_eq!(r.remaining(), 0);
        // Tagged fields with a tag and a body are skipped; a body that is
        // not there is malformed, and so are too many.
        let tagged = [2, 0, 1, 9, 5, 2, 1, 1];
        let mut r = Reader::flexible(&tagged);
        r.tagged_fields("tags").unwrap();
        assert_eq!(r.remaining(), 0);
        assert!(Reader::flexible(&[1, 0, 5, 1]).tagged_fields("t").is_err());
        assert!(Reader::flexible(&[65]).tagged_fields("t").is_err());
    }
}
