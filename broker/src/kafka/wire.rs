//! Kafka's primitive types on the wire (big-endian integers, strings and
//! byte arrays with an `int16`/`int32` length, `-1` for null, arrays with
//! an `int32` count), read from a request and written into an answer. Only
//! the non-flexible encodings: the listener advertises the versions before
//! each API's first flexible one (`versions.rs`), so no compact string or
//! tagged field ever arrives.

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
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
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
        let len = self.i16(what)?;
        if len < 0 {
            return Ok(None);
        }
        let bytes = self.take(len as usize, what)?;
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
        let count = self.i32(what)?;
        if count < 0 {
            return Ok(None);
        }
        let count = count as usize;
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
}

impl Writer {
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
        self.i16(bytes.len() as i16);
        self.out.extend_from_slice(bytes);
    }

    /// A `nullable_string`.
    pub fn nullable_string(&mut self, v: Option<&str>) {
        match v {
            Some(v) => self.string(v),
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
        self.i32(count as i32);
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
}
