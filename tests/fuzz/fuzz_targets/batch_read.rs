//! Message format 2's read path on hostile bytes, as a consumer (or the
//! broker's lookup by time) meets them: a producer's compressed batch is
//! stored as it came, so every codec and every record parser sees
//! whatever a hostile producer wrote. The first byte picks a codec: the
//! rest, as that codec's block, decompresses within its bound or fails
//! leaving nothing; the rest, as stored batches, is decoded and its
//! records read. Nothing may panic or pass its bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::batch::produce::batches;
use protocol::batch::{compression, read, Compression};

/// The bound a reader gives the codecs here (small, so a bomb meets it).
const BOUND: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    if let Some(codec) = Compression::from_bits(u16::from(selector)) {
        let mut out = b"kept".to_vec();
        match compression::decompress(codec, rest, BOUND, &mut out) {
            Ok(()) => assert!(out.len() - 4 <= BOUND, "{codec:?} passed its bound"),
            Err(_) => assert_eq!(out, b"kept", "{codec:?} left bytes behind on failure"),
        }
    }
    let mut scratch = Vec::new();
    for found in batches(rest) {
        let Ok((at, header)) = found else { break };
        let Ok((header, records)) = read::decode(&rest[at..at + header.size], BOUND, &mut scratch)
        else {
            continue;
        };
        assert!(records.len() <= BOUND.max(header.size));
        for record in read::records(&header, records) {
            let Ok(record) = record else { break };
            let _ = record.record.headers.to_vec();
        }
        let _ = read::first_at_or_after(&rest[at..at + header.size], 0, BOUND);
    }
});
