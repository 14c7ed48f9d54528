//! The format against Kafka's own bytes (written by Kafka 4.4's
//! `MemoryRecords.withIdempotentRecords`), and every refusal.

use super::produce::{batches, check, stamp, Stamp};
use super::records::{read_record, RecordError};
use super::varint::{read_varint, read_varlong, varint_len, write_varint, write_varlong};
use super::write::{BatchWriter, Producer};
use super::*;

/// Three records (key k1, value hello, header trace=t-1 at
/// 1700000000000; no key, world! at +5; key k3, no value at +3),
/// producer 4242 epoch 3 base sequence 17, leader epoch 0, uncompressed.
const JAVA_NONE: &str = "00000000000000000000005f00000000024a04c0140000000000020000018bcfe568000000018bcfe568050000000000001092000300000011000000032e000000046b310a68656c6c6f020a747261636506742d3118000a02010c776f726c64210010000604046b330100";
/// The same records, gzip.
const JAVA_GZIP: &str = "0000000000000000000000730000000002201bf4cb0001000000020000018bcfe568000000018bcfe568050000000000001092000300000011000000031f8b08000000000000ffd363606060c936e4ca48cdc9c967e22a294a4c4e652bd1359460e06262e429cf2fca4951641060606361c93666640000c8c6d9c32e000000";

/// The same records, snappy (xerial framing, one uncompressed-as-literal
/// chunk).
const JAVA_SNAPPY: &str = "0000000000000000000000750000000002d1ad1b0a0002000000020000018bcfe568000000018bcfe5680500000000000010920003000000110000000382534e41505059000000000100000001000000302eb42e000000046b310a68656c6c6f020a747261636506742d3118000a02010c776f726c64210010000604046b330100";
/// The same records, lz4 (a frame of independent 64 KiB blocks; this one
/// block is stored uncompressed, its high bit set).
const JAVA_LZ4: &str = "00000000000000000000006e0000000002ab8d284b0003000000020000018bcfe568000000018bcfe5680500000000000010920003000000110000000304224d186040822e0000802e000000046b310a68656c6c6f020a747261636506742d3118000a02010c776f726c64210010000604046b33010000000000";
/// The same records, zstd.
const JAVA_ZSTD: &str = "00000000000000000000006b0000000002717859ed0004000000020000018bcfe568000000018bcfe5680500000000000010920003000000110000000328b52ffd00587001002e000000046b310a68656c6c6f020a747261636506742d3118000a02010c776f726c64210010000604046b330100010000";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn java_records() -> BatchWriter {
    let mut writer = BatchWriter::new();
    writer.push(
        1_700_000_000_000,
        Some(b"k1"),
        Some(b"hello"),
        &[("trace", Some(b"t-1"))],
    );
    writer.push(1_700_000_000_005, None, Some(b"world!"), &[]);
    writer.push(1_700_000_000_003, Some(b"k3"), None, &[]);
    writer
}

const JAVA_PRODUCER: Producer = Producer {
    id: 4242,
    epoch: 3,
    base_sequence: 17,
};

/// `batch` with its CRC made right again after a test changed it.
fn recrc(mut batch: Vec<u8>) -> Vec<u8> {
    let crc = crc(&batch);
    batch[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

#[test]
fn crc32c_is_castagnoli() {
    // The check value of CRC-32C (RFC 3720, B.4).
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn varints_are_zigzag_as_kafka_writes_them() {
    for (value, bytes) in [
        (0, vec![0x00]),
        (-1, vec![0x01]),
        (1, vec![0x02]),
        (63, vec![0x7e]),
        (-64, vec![0x7f]),
        (64, vec![0x80, 0x01]),
        (i32::MIN, vec![0xff, 0xff, 0xff, 0xff, 0x0f]),
        (i32::MAX, vec![0xfe, 0xff, 0xff, 0xff, 0x0f]),
    ] {
        let mut out = Vec::new();
        write_varint(&mut out, value);
        assert_eq!(out, bytes, "{value}");
        assert_eq!(varint_len(value), bytes.len(), "{value}");
        assert_eq!(read_varint(&out), Some((value, out.len())));
    }
    for value in [0i64, -1, 1 << 40, i64::MIN, i64::MAX] {
        let mut out = Vec::new();
        write_varlong(&mut out, value);
        assert_eq!(read_varlong(&out), Some((value, out.len())), "{value}");
    }
    assert_eq!(read_varint(&[0x80]), None, "cut");
    assert_eq!(
        read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        None,
        "too long"
    );
    assert_eq!(
        read_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
        None,
        "past 32 bits"
    );
}

#[test]
fn a_batch_written_here_is_byte_for_byte_what_kafkas_client_writes() {
    let mut ours = java_records().finish(JAVA_PRODUCER);
    // Kafka's test helper wrote leader epoch 0 where a producer writes -1;
    // the field is outside the CRC.
    ours[at::LEADER_EPOCH..at::LEADER_EPOCH + 4].copy_from_slice(&0i32.to_be_bytes());
    assert_eq!(ours, hex(JAVA_NONE));
}

#[test]
fn kafkas_batches_pass_and_read_back_uncompressed_and_gzip() {
    for (text, codec) in [
        (JAVA_NONE, Compression::None),
        (JAVA_GZIP, Compression::Gzip),
    ] {
        let batch = hex(text);
        let header = check(&batch).unwrap();
        assert_eq!(header.compression(), Some(codec));
        assert_eq!(header.size, batch.len());
        assert_eq!(header.record_count, 3);
        assert_eq!(header.last_offset_delta, 2);
        assert_eq!(header.base_timestamp, 1_700_000_000_000);
        assert_eq!(header.max_timestamp, 1_700_000_000_005);
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (4242, 3, 17)
        );
        assert!(header.has_producer());
    }
    let batch = hex(JAVA_NONE);
    let mut at = HEADER_BYTES;
    let mut read = Vec::new();
    while at < batch.len() {
        let (record, len) = read_record(&batch[at..]).unwrap();
        read.push(record);
        at += len;
    }
    assert_eq!(read.len(), 3);
    assert_eq!(read[0].key, Some(&b"k1"[..]));
    assert_eq!(read[0].value, Some(&b"hello"[..]));
    assert_eq!(read[0].headers.to_vec(), vec![("trace", Some(&b"t-1"[..]))]);
    assert!(read[1].headers.is_empty());
    assert_eq!((read[1].key, read[1].value), (None, Some(&b"world!"[..])));
    assert_eq!(read[1].timestamp_delta, 5);
    assert_eq!((read[2].key, read[2].value), (Some(&b"k3"[..]), None));
    assert_eq!(
        read.iter().map(|r| r.offset_delta).collect::<Vec<_>>(),
        [0, 1, 2]
    );
}

#[test]
fn kafkas_compressed_batches_decompress_to_its_uncompressed_records() {
    let plain = hex(JAVA_NONE);
    for (text, codec) in [
        (JAVA_GZIP, Compression::Gzip),
        (JAVA_SNAPPY, Compression::Snappy),
        (JAVA_LZ4, Compression::Lz4),
        (JAVA_ZSTD, Compression::Zstd),
    ] {
        let batch = hex(text);
        let header = check(&batch).unwrap();
        assert_eq!(header.compression(), Some(codec));
        let mut records = Vec::new();
        compression::decompress(codec, &batch[HEADER_BYTES..], 1 << 20, &mut records).unwrap();
        assert_eq!(records, plain[HEADER_BYTES..], "{codec:?}");
    }
}

#[test]
fn a_batchs_records_read_with_their_offsets_and_times_in_every_codec() {
    for text in [JAVA_NONE, JAVA_GZIP, JAVA_SNAPPY, JAVA_LZ4, JAVA_ZSTD] {
        let mut batch = hex(text);
        stamp(
            &mut batch,
            Stamp {
                position: 1_000,
                leader_epoch: 0,
                log_append_time: None,
            },
        );
        let mut scratch = Vec::new();
        let (header, bytes) = read::decode(&batch, 1 << 20, &mut scratch).unwrap();
        let read: Vec<(i64, i64)> = read::records(&header, bytes)
            .map(|r| r.map(|r| (r.offset, r.timestamp)).unwrap())
            .collect();
        let t = 1_700_000_000_000;
        assert_eq!(read, [(1_000, t), (1_001, t + 5), (1_002, t + 3)]);
        // The first record of a time or later, in offset order.
        let first = |time| read::first_at_or_after(&batch, time, 1 << 20);
        assert_eq!(first(t), Some(1_000));
        assert_eq!(first(t + 1), Some(1_001));
        assert_eq!(first(t + 4), Some(1_001));
        assert_eq!(first(t + 5), Some(1_001));
        assert_eq!(first(t + 6), None);
        if text != JAVA_NONE {
            let bounded = read::first_at_or_after(&batch, t + 1, 3);
            assert_eq!(bounded, None, "decompressed past the bound");
        }
        // LogAppendTime: every record has the batch's time.
        let mut appended = hex(text);
        stamp(
            &mut appended,
            Stamp {
                position: 0,
                leader_epoch: 0,
                log_append_time: Some(t + 100),
            },
        );
        let (header, bytes) = read::decode(&appended, 1 << 20, &mut scratch).unwrap();
        assert!(read::records(&header, bytes).all(|r| r.unwrap().timestamp == t + 100));
        assert_eq!(
            read::first_at_or_after(&appended, t + 100, 1 << 20),
            Some(0)
        );
        assert_eq!(read::first_at_or_after(&appended, t + 101, 1 << 20), None);
    }
}

#[test]
fn a_compressed_batch_written_here_carries_the_same_records_and_falls_back_when_it_must() {
    let writer = java_records();
    let mut fell_back = 0;
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        // Three tiny records do not shrink: stored as they are.
        let batch = writer.finish_compressed(JAVA_PRODUCER, codec).unwrap();
        assert_eq!(batch, writer.finish(JAVA_PRODUCER), "{codec:?}");
        // Five hundred alike do.
        let mut many = BatchWriter::new();
        for n in 0..500 {
            many.push(
                1_700_000_000_000 + n,
                None,
                Some(b"the same line again"),
                &[],
            );
        }
        let batch = many.finish_compressed(Producer::NONE, codec).unwrap();
        let header = check(&batch).unwrap();
        assert_eq!(header.compression(), Some(codec));
        assert!(batch.len() < many.size() / 3, "{codec:?}: {}", batch.len());
        let mut records = Vec::new();
        compression::decompress(codec, &batch[HEADER_BYTES..], 1 << 20, &mut records).unwrap();
        assert_eq!(records, many.records(), "{codec:?}");
        // 100,000 empty records at one time: where a codec packs them
        // below a byte each, their offsets would run past the batch's
        // end, so they go uncompressed.
        let mut empty = BatchWriter::new();
        for _ in 0..100_000 {
            empty.push(1_700_000_000_000, None, None, &[]);
        }
        let mut block = Vec::new();
        compression::compress(codec, empty.records(), &mut block).unwrap();
        let too_dense = HEADER_BYTES + block.len() < 100_000;
        fell_back += usize::from(too_dense);
        let batch = empty.finish_compressed(Producer::NONE, codec).unwrap();
        let header = check(&batch).unwrap();
        let expected = if too_dense { Compression::None } else { codec };
        assert_eq!(
            header.compression(),
            Some(expected),
            "{codec:?}: {}",
            block.len()
        );
    }
    assert!(fell_back > 0, "no codec packed records below a byte each");
}

#[test]
fn a_batch_taken_from_its_writer_is_the_finished_batch_and_the_writer_starts_afresh() {
    // Kafka's bytes, taken in place (but for its helper's leader epoch).
    let mut writer = java_records();
    let mut taken = writer.take(JAVA_PRODUCER, Compression::None, Vec::new());
    taken[at::LEADER_EPOCH..at::LEADER_EPOCH + 4].copy_from_slice(&0i32.to_be_bytes());
    assert_eq!(taken, hex(JAVA_NONE));
    assert_eq!((writer.count(), writer.records().len()), (0, 0));
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        // The same writer, over and over, into recycled buffers (one left
        // full of another batch): each batch as `finish_compressed` makes
        // it, whether the codec shrinks it (500 alike) or not (three).
        let mut writer = BatchWriter::new();
        let mut spare = vec![0xEE; 4096];
        for round in 0..3i64 {
            let records = if round == 1 { 3 } else { 500 };
            for n in 0..records {
                writer.push(
                    1_700_000_000_000 + round * 1000 + n,
                    None,
                    Some(b"the same line again"),
                    &[],
                );
            }
            let expected = writer.finish_compressed(JAVA_PRODUCER, codec).unwrap();
            let batch = writer.take(JAVA_PRODUCER, codec, std::mem::take(&mut spare));
            assert_eq!(batch, expected, "{codec:?} round {round}");
            assert_eq!(check(&batch).unwrap().record_count, records as i32);
            assert_eq!((writer.count(), writer.size()), (0, HEADER_BYTES));
            spare = batch;
        }
    }
}

#[test]
fn a_stamped_batch_names_its_position_and_ends_where_the_next_begins() {
    let mut batch = hex(JAVA_GZIP);
    let size = batch.len() as i64;
    stamp(
        &mut batch,
        Stamp {
            position: 1_000_000,
            leader_epoch: 7,
            log_append_time: None,
        },
    );
    let header = BatchHeader::read(&batch).unwrap();
    assert_eq!(header.base_offset, 1_000_000);
    assert_eq!(header.leader_epoch, 7);
    assert_eq!(header.last_offset(), 1_000_000 + size - 1);
    assert_eq!(
        header.crc,
        crc(&batch),
        "the CRC covers the new lastOffsetDelta"
    );
    assert_eq!(header.max_timestamp, 1_700_000_000_005, "CreateTime kept");
    assert_eq!(
        &batch[HEADER_BYTES..],
        &hex(JAVA_GZIP)[HEADER_BYTES..],
        "the records are not touched"
    );
    // Stored bytes are not a producer's: sent again, they are refused.
    assert_eq!(
        check(&batch),
        Err(BatchError::LastOffsetDelta {
            delta: size as i32 - 1,
            count: 3
        })
    );
    stamp(
        &mut batch,
        Stamp {
            position: 0,
            leader_epoch: 8,
            log_append_time: Some(1_800_000_000_000),
        },
    );
    let header = BatchHeader::read(&batch).unwrap();
    assert_eq!(
        header.attributes & ATTR_LOG_APPEND_TIME,
        ATTR_LOG_APPEND_TIME
    );
    assert_eq!(header.max_timestamp, 1_800_000_000_000);
    assert_eq!(header.compression(), Some(Compression::Gzip));
    assert_eq!(header.crc, crc(&batch));
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one refusal per rule of the check, read top to bottom"
)]
fn every_broken_rule_is_refused_by_name() {
    let good = java_records().finish(Producer::NONE);
    assert!(check(&good).is_ok());
    let with = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        recrc(b)
    };
    assert_eq!(
        check(&good[..60]),
        Err(BatchError::Short { have: 60, need: 61 })
    );
    assert_eq!(
        check(&good[..good.len() - 1]),
        Err(BatchError::Short {
            have: good.len() - 1,
            need: good.len()
        })
    );
    let mut long = good.clone();
    long.push(0);
    assert_eq!(check(&long), Err(BatchError::Trailing(1)));
    let mut magic = good.clone();
    magic[at::MAGIC] = 1;
    assert_eq!(check(&magic), Err(BatchError::Magic(1)));
    assert_eq!(
        check(&with(at::LENGTH, &48i32.to_be_bytes())),
        Err(BatchError::Length(48))
    );
    assert_eq!(
        check(&with(at::LENGTH, &(-1i32).to_be_bytes())),
        Err(BatchError::Length(-1))
    );
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 1;
    assert!(
        matches!(check(&flipped), Err(BatchError::Crc { stored, computed }) if stored != computed),
        "{:?}",
        check(&flipped)
    );
    assert_eq!(
        check(&with(at::ATTRIBUTES, &5u16.to_be_bytes())),
        Err(BatchError::Codec(5))
    );
    assert_eq!(
        check(&with(at::ATTRIBUTES, &ATTR_CONTROL.to_be_bytes())),
        Err(BatchError::Control)
    );
    assert_eq!(
        check(&with(at::ATTRIBUTES, &ATTR_TRANSACTIONAL.to_be_bytes())),
        Err(BatchError::Transactional)
    );
    assert_eq!(
        check(&with(at::RECORD_COUNT, &0i32.to_be_bytes())),
        Err(BatchError::RecordCount {
            count: 0,
            size: good.len()
        })
    );
    assert_eq!(
        check(&with(at::LAST_OFFSET_DELTA, &5i32.to_be_bytes())),
        Err(BatchError::LastOffsetDelta { delta: 5, count: 3 })
    );
    assert_eq!(
        check(&with(at::PRODUCER_ID, &7i64.to_be_bytes())),
        Err(BatchError::Producer {
            id: 7,
            epoch: -1,
            sequence: -1
        })
    );
    // Fewer records than it says (count 4, delta 3): the walk runs out.
    let more = with(at::RECORD_COUNT, &4i32.to_be_bytes());
    let more = recrc({
        let mut b = more;
        b[at::LAST_OFFSET_DELTA..at::LAST_OFFSET_DELTA + 4].copy_from_slice(&3i32.to_be_bytes());
        b
    });
    assert_eq!(
        check(&more),
        Err(BatchError::Records {
            found: 3,
            left: 0,
            count: 4
        })
    );
    // A record whose offsetDelta is not its index (the second record's
    // delta byte: its length, attributes, a one-byte timestamp delta).
    let second = HEADER_BYTES + 1 + usize::from(good[HEADER_BYTES] >> 1);
    assert_eq!(good[second + 3], 0x02, "the second record's offsetDelta 1");
    let mut skewed = good.clone();
    skewed[second + 3] = 0x04;
    assert_eq!(
        check(&recrc(skewed)),
        Err(BatchError::Record {
            index: 1,
            problem: RecordError::OffsetDelta { index: 1, found: 2 }
        })
    );
}

#[test]
fn a_compressed_batch_may_not_claim_more_records_than_bytes() {
    let mut writer = BatchWriter::new();
    writer.push(0, None, Some(b"x"), &[]);
    // 200 records claimed in 70 bytes of "compressed" records.
    let records = vec![0u8; 9];
    let mut batch = writer.finish_with(Producer::NONE, Compression::Zstd, &records);
    batch[at::RECORD_COUNT..at::RECORD_COUNT + 4].copy_from_slice(&200i32.to_be_bytes());
    batch[at::LAST_OFFSET_DELTA..at::LAST_OFFSET_DELTA + 4].copy_from_slice(&199i32.to_be_bytes());
    let batch = recrc(batch);
    assert_eq!(
        check(&batch),
        Err(BatchError::RecordCount {
            count: 200,
            size: 70
        })
    );
}

#[test]
fn batches_are_found_one_after_another_and_a_cut_one_is_named() {
    let one = java_records().finish(JAVA_PRODUCER);
    let two = hex(JAVA_GZIP);
    let mut bytes = one.clone();
    bytes.extend_from_slice(&two);
    bytes.extend_from_slice(&one[..70]);
    let found: Vec<_> = batches(&bytes).collect();
    assert_eq!(found.len(), 3);
    assert_eq!(found[0].as_ref().unwrap().0, 0);
    assert_eq!(found[1].as_ref().unwrap().0, one.len());
    assert_eq!(
        found[2],
        Err(BatchError::Short {
            have: 70,
            need: one.len()
        })
    );
}

#[test]
fn a_renumbered_batch_carries_its_new_numbers_and_still_checks() {
    let records = java_records();
    let mut batch = records.finish(super::write::Producer {
        id: 5,
        epoch: 0,
        base_sequence: 40,
    });
    let before = BatchHeader::read(&batch).unwrap();
    let numbered = super::sequence::Numbered::of(&before).unwrap();
    assert_eq!((numbered.first, numbered.epoch), (40, 0));
    super::write::renumber(
        &mut batch,
        super::write::Producer {
            id: 5,
            epoch: 1,
            base_sequence: 0,
        },
    );
    let after = super::produce::check(&batch).unwrap();
    let numbered = super::sequence::Numbered::of(&after).unwrap();
    assert_eq!(
        (numbered.producer_id, numbered.epoch, numbered.first),
        (5, 1, 0)
    );
    assert_eq!(numbered.last, after.record_count - 1);
    assert_eq!(
        BatchHeader::read(&records.finish(super::write::Producer::NONE))
            .map(|h| super::sequence::Numbered::of(&h)),
        Ok(None)
    );
}
