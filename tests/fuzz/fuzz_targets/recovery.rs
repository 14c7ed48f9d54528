//! Recovery over random segment bytes: the input is split into up to three
//! segment files (and an optional recovery point) in a fresh partition
//! directory, and `recover` runs over them. It may cut or keep, but never
//! panic, never keep more bytes than a file holds, keep segments contiguous,
//! and whatever it keeps above the recovery point of the last segment must
//! be whole valid units — format-1 messages, or, when the first byte's top
//! bit is set, format-2 batches. The files live on the in-memory disk
//! (`storage::memory`), the same code path as on a real one.
#![no_main]

use broker::storage::io::Storage;
use broker::storage::memory::MemoryStorage;
use broker::storage::recovery::{self, recover};
use libfuzzer_sys::fuzz_target;
use protocol::stored::{unit, MessageFormat, Unit};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let storage = MemoryStorage::new();
    let dir = Path::new("/fuzz/t-0");
    storage.create_dir_all(dir).unwrap();
    // First byte: how to cut the rest into segments and whether a recovery
    // point is written.
    let (control, body) = data.split_first().unwrap_or((&0, &[]));
    let pieces = 1 + (control & 3) as usize % 3;
    let chunk = body.len().div_ceil(pieces).max(1);
    let mut base = 0u64;
    let mut sizes = Vec::new();
    for piece in body.chunks(chunk) {
        let name = format!("{base:020}.log");
        storage.overwrite_file(&dir.join(name), piece, true).unwrap();
        sizes.push((base, piece.len() as u64));
        base += piece.len() as u64;
    }
    if control & 4 != 0 {
        let point = u64::from(control >> 3) * 16;
        recovery::write_recovery_point(&storage, dir, point.min(base), false).unwrap();
    }
    let format = if control & 0x80 != 0 {
        MessageFormat::Two
    } else {
        MessageFormat::One
    };
    let recovered = recover(&storage, dir, "fuzz-0", format).unwrap();
    let mut expected_base = recovered.segments.first().map_or(0, |s| s.base_offset);
    for segment in &recovered.segments {
        assert_eq!(segment.base_offset, expected_base, "segments contiguous");
        let written = sizes
            .iter()
            .find(|(b, _)| *b == segment.base_offset)
            .map_or(0, |(_, len)| *len);
        assert!(
            segment.size_bytes <= written,
            "kept more than the file holds"
        );
        let on_disk = storage
            .len(&dir.join(format!("{:020}.log", segment.base_offset)))
            .unwrap();
        assert_eq!(
            on_disk, segment.size_bytes,
            "the file was cut to what is kept"
        );
        expected_base += segment.size_bytes;
    }
    if control & 4 == 0 {
        // Without a recovery point everything kept in the last segment was
        // checked: whole messages whose length fields frame it exactly, the
        // last one valid; one with bad contents only before a valid one
        // (rot is kept, a torn tail is cut).
        if let Some(last) = recovered.segments.last() {
            let bytes = storage
                .read_file(&dir.join(format!("{:020}.log", last.base_offset)))
                .unwrap();
            let mut at = 0;
            let mut last_valid = true;
            while at < bytes.len() {
                let offset = last.base_offset + at as u64;
                let len = match unit(format, &bytes[at..], offset) {
                    Unit::Whole { len, .. } => {
                        last_valid = true;
                        len
                    }
                    Unit::Damaged {
                        framed: Some(len), ..
                    } => {
                        last_valid = false;
                        len
                    }
                    other => panic!("kept bytes at {offset} are not whole units: {other:?}"),
                };
                at += len;
            }
            assert_eq!(at, bytes.len(), "kept bytes are whole units");
            assert!(last_valid, "the last kept unit is valid");
        }
    }
});
