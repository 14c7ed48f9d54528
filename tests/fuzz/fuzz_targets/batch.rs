//! Message format 2's produce path on hostile bytes: a record batch v2
//! is checked, and if it passes, stamped and read back. Nothing may
//! panic; a batch that passes holds 1 ..= size records, each parsing
//! (uncompressed), and once stamped names its position, ends at
//! position + size - 1 and carries a right CRC-32C.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::batch::produce::{batches, check, stamp, Stamp};
use protocol::batch::records::check_records;
use protocol::batch::{crc, BatchHeader, Compression, HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    for found in batches(data) {
        let Ok((at, header)) = found else { break };
        assert!(at + header.size <= data.len());
        if header.compression() == Some(Compression::None) {
            let _ = check_records(&data[at + HEADER_BYTES..at + header.size], header.record_count);
        }
    }
    let Ok(header) = check(data) else { return };
    assert_eq!(header.size, data.len());
    assert!(header.record_count >= 1 && header.record_count as usize <= header.size);
    if header.compression() == Some(Compression::None) {
        assert_eq!(
            check_records(&data[HEADER_BYTES..], header.record_count),
            Ok((header.record_count, 0))
        );
    }
    let mut stored = data.to_vec();
    stamp(
        &mut stored,
        Stamp {
            position: 1 << 40,
            leader_epoch: 9,
            log_append_time: Some(1),
        },
    );
    let again = BatchHeader::read(&stored).expect("a stamped batch reads");
    assert_eq!(again.base_offset, 1 << 40);
    assert_eq!(again.last_offset(), (1 << 40) + data.len() as i64 - 1);
    assert_eq!(again.crc, crc(&stored));
    assert_eq!(&stored[HEADER_BYTES..], &data[HEADER_BYTES..]);
});
