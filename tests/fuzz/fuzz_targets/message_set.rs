//! The message-set parser, both ways it is used: the broker's validation
//! of a produced set and the consumer's iteration over a fetched chunk.
//! They must agree: a set that validates iterates to exactly its count of
//! messages and ends at its length; iteration never reads past the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::message::{validate_message_set, MessageSetIter};

fuzz_target!(|data: &[u8]| {
    let validated = validate_message_set(data);
    let mut iter = MessageSetIter::new(data, 1_000);
    let mut whole = 0u32;
    let mut failed = false;
    for message in iter.by_ref() {
        match message {
            Ok(m) => {
                assert!(m.offset >= 1_000 && m.offset < 1_000 + data.len() as u64);
                whole += 1;
            }
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(iter.next_offset() <= 1_000 + data.len() as u64);
    if let Ok(summary) = validated {
        assert!(!failed, "a validated set failed to iterate");
        assert_eq!(summary.count, whole, "validation and iteration disagree");
        assert_eq!(iter.next_offset(), 1_000 + data.len() as u64);
    }
});
