//! What a produced request costs the broker to check, per message, in each
//! message format: format 1 (the paper's: length, magic, CRC-32 per
//! message) and format 2 (Kafka's record batch v2: one CRC-32C per batch,
//! records walked when uncompressed, then the broker's stamp). Also the
//! bytes each stores per message.
//!
//! ```text
//! cargo run --release -p ringlog-protocol --example format_cost [BATCH] [VALUE_BYTES] [ROUNDS]
//! ```
//!
//! (defaults 50, 100, 200000). A measurement, not a test: run it on a quiet
//! machine, or under `valgrind --tool=callgrind` for instruction counts.

use protocol::batch::produce::{check, stamp, Stamp};
use protocol::batch::write::{BatchWriter, Producer};
use protocol::message::{encode_message, validate_message_set};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let batch = args.next().and_then(Result::ok).unwrap_or(50);
    let value_bytes = args.next().and_then(Result::ok).unwrap_or(100);
    let rounds = args.next().and_then(Result::ok).unwrap_or(200_000);
    let value = vec![b'x'; value_bytes];

    let mut one = Vec::new();
    for _ in 0..batch {
        encode_message(&mut one, None, &value);
    }
    let mut writer = BatchWriter::new();
    for i in 0..batch {
        writer.push(1_700_000_000_000 + i as i64, None, Some(&value), &[]);
    }
    let two = writer.finish(Producer::NONE);

    // Each round copies the request into the bytes to store, as the
    // broker's append does, in both formats.
    let mut stored_one = one.clone();
    let started = Instant::now();
    for _ in 0..rounds {
        stored_one.copy_from_slice(black_box(&one));
        let summary = validate_message_set(&stored_one);
        assert!(summary.is_ok());
    }
    let format_1 = started.elapsed().as_nanos() as f64 / (rounds * batch) as f64;

    let mut stored = two.clone();
    let started = Instant::now();
    for round in 0..rounds {
        stored.copy_from_slice(black_box(&two));
        let header = check(&stored);
        assert!(header.is_ok());
        stamp(
            &mut stored,
            Stamp {
                position: round as u64 * two.len() as u64,
                leader_epoch: 1,
                log_append_time: None,
            },
        );
    }
    let format_2 = started.elapsed().as_nanos() as f64 / (rounds * batch) as f64;

    println!("{batch} messages of {value_bytes} bytes, {rounds} rounds");
    println!(
        "format 1: {format_1:.2} ns/message to copy and check; {:.2} bytes stored per message",
        one.len() as f64 / batch as f64
    );
    println!(
        "format 2: {format_2:.2} ns/message to copy, check and stamp; {:.2} bytes stored per message",
        two.len() as f64 / batch as f64
    );
}
