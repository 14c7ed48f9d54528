use super::*;
use protocol::message::{encode_message, MessageSetIter};

/// Runs a test body on a small glommio executor (the storage code uses
/// io_uring through glommio, so the tests do too).
fn run<F: std::future::Future<Output = ()> + 'static>(body: impl FnOnce() -> F + Send + 'static) {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(256 * 1024)
        .spawn(move || async move { body().await })
        .unwrap()
        .join()
        .unwrap();
}

fn temp_dir(label: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("ringlog-unit-{}-{label}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn settings(segment_bytes: u64) -> LogSettings {
    LogSettings {
        segment_bytes,
        flush_messages: 1_000_000,
        flush_interval_ms: 1_000_000,
        retention_ms: 7 * 24 * 3600 * 1000,
        retention_bytes: 0,
        format: protocol::stored::MessageFormat::One,
        timestamps: protocol::batch::TimestampType::Create,
        producers_max: 1000,
        waiting_fetch_flush: Some(std::time::Duration::from_millis(1)),
    }
}

fn message(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_message(&mut out, None, value);
    out
}

async fn open(dir: &Path, segment_bytes: u64) -> SharedLog {
    let (log, _) = PartitionLog::open(DiskStorage::plain(), dir, "t-0", settings(segment_bytes))
        .await
        .unwrap();
    Rc::new(RefCell::new(log))
}

async fn read_values(log: &SharedLog, offset: u64) -> Vec<Vec<u8>> {
    let mut values = Vec::new();
    let mut at = offset;
    loop {
        let slice = read(log, at, 1 << 20).await.unwrap();
        let Some(slice) = slice else { return values };
        let bytes = slice
            .file
            .read_at(slice.position, slice.len as usize)
            .await
            .unwrap();
        let mut iter = MessageSetIter::new(&bytes, at);
        for m in iter.by_ref() {
            values.push(m.unwrap().value.to_vec());
        }
        at = iter.next_offset();
    }
}

#[test]
fn offsets_are_byte_positions_and_unflushed_messages_are_not_visible() {
    run(|| async {
        let dir = temp_dir("visible");
        let log = open(&dir, 1 << 20).await;
        let (base, end) = log.borrow_mut().append(&message(b"hello"), 1).unwrap();
        assert_eq!((base, end), (0, 14));
        let (base, end) = log.borrow_mut().append(&message(b"world!"), 1).unwrap();
        assert_eq!((base, end), (14, 29));
        // Appended, not flushed: a fetch sees nothing yet.
        assert!(read(&log, 0, 100).await.unwrap().is_none());
        request_sync(&log, false);
        let watermarks = log.borrow().watermarks();
        watermarks
            .wait_until(|| log.borrow().written_offset() == 29)
            .await;
        assert!(
            read(&log, 0, 100).await.unwrap().is_none(),
            "written is not flushed"
        );
        sync_all(&log).await.unwrap();
        assert_eq!(log.borrow().flushed_offset(), 29);
        assert_eq!(
            read_values(&log, 0).await,
            vec![b"hello".to_vec(), b"world!".to_vec()]
        );
        assert_eq!(read_values(&log, 14).await, vec![b"world!".to_vec()]);
        // Past the end is out of range, with the valid range.
        assert!(matches!(
            log.borrow().try_read(30, 100),
            Err(StorageError::OffsetOutOfRange {
                requested: 30,
                start: 0,
                end: 29
            })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// A flush policy of ~17 minutes, `acks = written` appends: only a fetch
/// waiting at the end makes them flushed (visible) within the waiting-
/// fetch delay (200 ms here), first what was there when it began to
/// wait, then every later append; once it stops waiting, the policy
/// alone decides again. (Turned off: the
/// integration test `produce_consume::a_consumer_at_the_end_sees_messages_after_one_flush`.)
#[test]
fn a_waiting_fetch_has_appends_flushed_within_its_delay() {
    run(|| async {
        let dir = temp_dir("waiting-fetch");
        let delay = std::time::Duration::from_millis(200);
        let (log, _) = PartitionLog::open(
            DiskStorage::plain(),
            &dir,
            "t-0",
            LogSettings {
                format: protocol::stored::MessageFormat::One,
                waiting_fetch_flush: Some(delay),
                ..settings(1 << 20)
            },
        )
        .await
        .unwrap();
        let log = Rc::new(RefCell::new(log));
        let watermarks = log.borrow().watermarks();
        let first = append(&log, &message(b"before"), 1, AckMode::Written).unwrap();
        stored(&log, first, AckMode::Written).await.unwrap();
        assert_eq!(log.borrow().flushed_offset(), 0, "the policy waits");
        // Within 5 s, or never: the policy's interval is 1,000 s.
        let flushed_to = |end: u64| {
            let (log, watermarks) = (log.clone(), watermarks.clone());
            futures_lite::future::or(
                async move {
                    watermarks
                        .wait_until(|| log.borrow().flushed_offset() == end)
                        .await;
                    true
                },
                async {
                    glommio::timer::sleep(std::time::Duration::from_secs(5)).await;
                    false
                },
            )
        };
        let waiting = fetch_waits(&log);
        assert_eq!(log.borrow().flushed_offset(), 0, "a timer, not at once");
        assert!(flushed_to(first.end).await, "what the fetch waits for");
        let second = append(&log, &message(b"during"), 1, AckMode::Written).unwrap();
        assert!(flushed_to(second.end).await, "an append during the wait");
        drop(waiting);
        let third = append(&log, &message(b"after"), 1, AckMode::Written).unwrap();
        stored(&log, third, AckMode::Written).await.unwrap();
        glommio::timer::sleep(delay * 2).await;
        assert_eq!(
            log.borrow().flushed_offset(),
            second.end,
            "nobody waits: the policy decides again"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// A client that keeps a fetch waiting and appends as fast as it can
/// gets no more than one flush round per delay: 300 appends, one every
/// millisecond, under a 50 ms delay (flushing at once would be a round
/// per append).
#[test]
fn a_waiting_fetch_costs_at_most_one_flush_round_per_delay() {
    run(|| async {
        let dir = temp_dir("waiting-fetch-bound");
        let delay = std::time::Duration::from_millis(50);
        let storage = DiskStorage::plain();
        let (log, _) = PartitionLog::open(
            storage.clone(),
            &dir,
            "t-0",
            LogSettings {
                format: protocol::stored::MessageFormat::One,
                waiting_fetch_flush: Some(delay),
                ..settings(1 << 20)
            },
        )
        .await
        .unwrap();
        let log = Rc::new(RefCell::new(log));
        let syncs = || storage.driver().stats().syncs.get();
        let before = syncs();
        let started = std::time::Instant::now();
        let _waiting = fetch_waits(&log);
        let mut last = None;
        for i in 0..300u32 {
            let value = i.to_le_bytes();
            last = Some(append(&log, &message(&value), 1, AckMode::Written).unwrap());
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        }
        let end = last.unwrap().end;
        let watermarks = log.borrow().watermarks();
        watermarks
            .wait_until(|| log.borrow().flushed_offset() == end)
            .await;
        let rounds_allowed = (started.elapsed().as_millis() / delay.as_millis()) as u64 + 2;
        // A round syncs the segment file, and the first also its directory.
        let synced = syncs() - before;
        assert!(
            synced <= 2 * rounds_allowed,
            "{synced} files synced for at most {rounds_allowed} rounds"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn segments_roll_at_the_size_limit_and_reads_stop_at_segment_ends() {
    run(|| async {
        let dir = temp_dir("roll");
        let log = open(&dir, 1024).await;
        let value = [7u8; 91]; // 100 bytes stored
        for _ in 0..25 {
            log.borrow_mut().append(&message(&value), 1).unwrap();
        }
        sync_all(&log).await.unwrap();
        assert_eq!(log.borrow().segment_count(), 3, "10 + 10 + 5 messages");
        let names: Vec<String> = {
            let mut n: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".log"))
                .collect();
            n.sort();
            n
        };
        assert_eq!(
            names,
            vec![
                "00000000000000000000.log",
                "00000000000000001000.log",
                "00000000000000002000.log"
            ]
        );
        // One read never crosses a segment boundary.
        let slice = read(&log, 900, 1 << 20).await.unwrap().unwrap();
        assert_eq!((slice.position, slice.len), (900, 100));
        assert_eq!(read_values(&log, 0).await.len(), 25);
        // Reopen: the same segments, offsets and data.
        drop(log);
        let log = open(&dir, 1024).await;
        assert_eq!(log.borrow().end_offset(), 2500);
        assert_eq!(read_values(&log, 0).await.len(), 25);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn recovery_truncates_a_torn_tail_the_test_writes_itself() {
    run(|| async {
        let dir = temp_dir("torn");
        let log = open(&dir, 1 << 20).await;
        for i in 0..10u8 {
            log.borrow_mut().append(&message(&[i; 20]), 1).unwrap();
        }
        sync_all(&log).await.unwrap();
        drop(log);
        // Half a message at the end, as a crash mid-write leaves it.
        let torn = &message(&[9; 20])[..15];
        let path = dir.join("00000000000000000000.log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(torn);
        std::fs::write(&path, &bytes).unwrap();
        std::fs::remove_file(dir.join(recovery::RECOVERY_POINT_FILE)).ok();
        let (log, recovered) =
            PartitionLog::open(DiskStorage::plain(), &dir, "t-0", settings(1 << 20))
                .await
                .unwrap();
        assert_eq!(recovered.bytes_cut, 15);
        assert_eq!(log.end_offset(), 290);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 290);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn a_transient_failure_drops_the_unwritten_tail_refuses_then_accepts_again() {
    run(|| async {
        let dir = temp_dir("rollback");
        let log = open(&dir, 1024).await;
        for _ in 0..5 {
            log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
        }
        sync_all(&log).await.unwrap();
        let epoch = log.borrow().epoch();
        // Unwritten: 6 more messages, rolling into two more segments;
        // a failed write had begun the second's file (and a short one
        // extended the first).
        let (_, end) = log.borrow_mut().append(&message(&[2; 891]), 1).unwrap();
        for _ in 0..5 {
            log.borrow_mut().append(&message(&[3; 91]), 1).unwrap();
        }
        assert_eq!(log.borrow().segment_count(), 3);
        let first = dir.join("00000000000000000000.log");
        let second = dir.join(super::super::segment::segment_file_name(500));
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&first)
            .unwrap();
        f.set_len(700).unwrap();
        std::fs::write(&second, b"half a chunk").unwrap();
        log.borrow_mut()
            .roll_back_unwritten("disk full".into())
            .unwrap();
        {
            let l = log.borrow();
            assert_eq!((l.end_offset(), l.written_offset()), (500, 500));
            assert_eq!(l.segment_count(), 1);
            assert_eq!(std::fs::metadata(&first).unwrap().len(), 500);
            assert!(!second.exists(), "the rolled segment's file is removed");
            // Waiters learn which appends were dropped.
            assert_eq!(l.dropped(epoch, end), Some("disk full"));
            assert_eq!(l.dropped(epoch, 500), None, "written before the failure");
            assert_eq!(l.dropped(l.epoch(), 10_000), None);
        }
        // Refused for a moment, with the reason; then accepted again at
        // the offsets that were given back.
        let refused = log.borrow_mut().append(&message(b"x"), 1).unwrap_err();
        assert!(
            matches!(refused, StorageError::Unavailable { ref reason, .. } if reason == "disk full"),
            "{refused}"
        );
        log.borrow_mut().refusing = None;
        let (base, _) = log.borrow_mut().append(&message(&[4; 91]), 1).unwrap();
        assert_eq!(base, 500);
        sync_all(&log).await.unwrap();
        let values = read_values(&log, 0).await;
        assert_eq!(values.len(), 6);
        assert_eq!(values[5], vec![4; 91]);
        assert_eq!(
            log.borrow().dropped(epoch, end),
            Some("disk full"),
            "a dropped append stays dropped though its offsets were reused"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn idle_segment_files_are_closed_and_reopened_on_demand() {
    run(|| async {
        let dir = temp_dir("idle");
        let log = open(&dir, 1024).await;
        for _ in 0..35 {
            log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
        }
        sync_all(&log).await.unwrap();
        assert_eq!(log.borrow().segment_count(), 4);
        assert_eq!(log.borrow().files_open(), 4, "written segments are open");
        let now = Instant::now();
        let idle = Duration::from_secs(10);
        assert_eq!(
            log.borrow_mut().close_idle_files(now, idle),
            0,
            "not idle yet"
        );
        // A fetch holding a file keeps it open.
        let held = read(&log, 1000, 100).await.unwrap().unwrap();
        let later = now + Duration::from_secs(60);
        assert_eq!(log.borrow_mut().close_idle_files(later, idle), 3);
        assert_eq!(log.borrow().files_open(), 1);
        drop(held);
        assert_eq!(log.borrow_mut().close_idle_files(later, idle), 1);
        assert_eq!(log.borrow().files_open(), 0);
        // Reads open what they need, a few at a time; appends reopen the
        // active segment.
        assert_eq!(read_values(&log, 0).await.len(), 35);
        assert!(log.borrow().files_open() <= crate::limits::SEGMENT_FILES_PER_LOG_MAX);
        log.borrow_mut().append(&message(&[2; 91]), 1).unwrap();
        sync_all(&log).await.unwrap();
        assert_eq!(read_values(&log, 3500).await, vec![vec![2; 91]]);
        // A reopened log opens nothing until it is used.
        drop(log);
        let log = open(&dir, 1024).await;
        assert_eq!(log.borrow().files_open(), 0);
        assert_eq!(read_values(&log, 0).await.len(), 36);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn damage_across_a_roll_is_a_torn_tail_but_damage_before_intact_data_is_kept() {
    run(|| async {
        for zero_the_rest in [true, false] {
            let dir = temp_dir("across-roll");
            let log = open(&dir, 1024).await;
            for _ in 0..25 {
                log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
            }
            sync_all(&log).await.unwrap();
            drop(log);
            // A stale recovery point, as a crash leaves it.
            recovery::write_recovery_point(&DiskStorage::plain(), &dir, 500, true).unwrap();
            let second = dir.join(super::super::segment::segment_file_name(1000));
            let third = dir.join(super::super::segment::segment_file_name(2000));
            let mut bytes = std::fs::read(&second).unwrap();
            if zero_the_rest {
                // Power cut: the unsynced tail of a closed segment and the
                // whole next one are zeros.
                bytes[500..].fill(0);
                std::fs::write(&third, vec![0u8; 500]).unwrap();
            } else {
                // One bad byte, then intact messages: not a tail.
                bytes[550] ^= 0x5a;
            }
            std::fs::write(&second, &bytes).unwrap();
            let (log, recovered) =
                PartitionLog::open(DiskStorage::plain(), &dir, "t-0", settings(1024))
                    .await
                    .unwrap();
            if zero_the_rest {
                assert_eq!(log.end_offset(), 1500, "cut where the zeros begin");
                assert!(!third.exists(), "the zeroed segment after it is gone");
                assert_eq!(recovered.damaged_segments, 0);
            } else {
                assert_eq!(log.end_offset(), 2500, "everything kept");
                assert_eq!(recovered.damaged_segments, 1);
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    });
}

#[test]
fn retention_removes_old_closed_segments_but_never_the_active_one() {
    run(|| async {
        let dir = temp_dir("retention");
        let log = open(&dir, 1024).await;
        for _ in 0..35 {
            log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
        }
        sync_all(&log).await.unwrap();
        assert_eq!(log.borrow().segment_count(), 4);
        // Nothing is old yet.
        assert!(log.borrow_mut().enforce_retention(now_ms()).is_empty());
        // Far in the future everything closed is expired; the active segment stays.
        let removed = log
            .borrow_mut()
            .enforce_retention(now_ms() + 30 * 24 * 3600 * 1000);
        assert_eq!(removed.len(), 3);
        for retired in &removed {
            assert!(retired.path.to_string_lossy().ends_with(".log.deleted"));
            std::fs::remove_file(&retired.path).unwrap();
        }
        assert_eq!(log.borrow().segment_count(), 1);
        assert_eq!(log.borrow().start_offset(), 3000);
        assert!(matches!(
            log.borrow().try_read(0, 10),
            Err(StorageError::OffsetOutOfRange { start: 3000, .. })
        ));
        assert_eq!(read_values(&log, 3000).await.len(), 5);
        // Offsets before a time: segment granularity.
        assert_eq!(log.borrow().offset_before_time(0), 3000);
        assert_eq!(log.borrow().offset_before_time(now_ms() + 1_000_000), 3500);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn size_retention_keeps_the_log_under_its_limit() {
    run(|| async {
        let dir = temp_dir("size");
        let log = open(&dir, 1024).await;
        log.borrow_mut().settings.retention_bytes = 2048;
        for _ in 0..50 {
            log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
        }
        sync_all(&log).await.unwrap();
        let removed = log.borrow_mut().enforce_retention(now_ms());
        // As Kafka does: drop the oldest while the rest still holds at
        // least retention_bytes, so 3000 of 5000 bytes stay.
        assert_eq!(removed.len(), 2, "5000 bytes in 5 segments");
        assert_eq!(log.borrow().start_offset(), 2000);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

async fn open_format_two(
    dir: &Path,
    segment_bytes: u64,
    timestamps: protocol::batch::TimestampType,
) -> SharedLog {
    let settings = LogSettings {
        format: protocol::stored::MessageFormat::Two,
        timestamps,
        ..settings(segment_bytes)
    };
    let (log, _) = PartitionLog::open(DiskStorage::plain(), dir, "t-0", settings)
        .await
        .unwrap();
    Rc::new(RefCell::new(log))
}

/// 200 batches of 10 records over several segments (each with indexed
/// starts inside), in all five codecs, one batch with an early clock: every lookup by time answers the first
/// record of that time or later — from the indexes built by the appends,
/// and again after a reopen, from hops over the files.
#[test]
fn offsets_by_time_are_exact_records_in_format_two_before_and_after_a_reopen() {
    use protocol::batch::write::{BatchWriter, Producer};
    use protocol::batch::Compression;
    run(|| async {
        let dir = temp_dir("by-time");
        let mut log = open_format_two(&dir, 16_384, protocol::batch::TimestampType::Create).await;
        let codecs = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        // Every record's offset and time, in log order.
        let mut records: Vec<(u64, i64)> = Vec::new();
        for b in 0..200i64 {
            let mut writer = BatchWriter::new();
            let times: Vec<i64> = (0..10)
                .map(|r| if b == 30 { 5 } else { 1_000 * b + 10 * r })
                .collect();
            for (r, &time) in times.iter().enumerate() {
                let value = format!("{{\"batch\":{b},\"record\":{r},\"msg\":\"served\"}}");
                writer.push(time, None, Some(value.as_bytes()), &[]);
            }
            let codec = codecs[b as usize % codecs.len()];
            let batch = writer.finish_compressed(Producer::NONE, codec).unwrap();
            let (base, _) = log.borrow_mut().append(&batch, 10).unwrap();
            records.extend(times.iter().enumerate().map(|(r, &t)| (base + r as u64, t)));
        }
        sync_all(&log).await.unwrap();
        assert!(log.borrow().segment_count() >= 3, "several segments");
        let end = log.borrow().end_offset();
        let expected = |time: i64| {
            records
                .iter()
                .find(|&&(_, t)| t >= time)
                .map_or(end, |&(offset, _)| offset)
        };
        let times: Vec<i64> = [0, 1, 5, 6, 10, 11, 29_990, 29_991, 30_000, 31_000, 44_444]
            .into_iter()
            .chain((0..200).map(|b| 1_000 * b + 55))
            .chain([199_090, 199_091, 1_000_000])
            .collect();
        for round in ["appended", "reopened"] {
            for &time in &times {
                let found = offset_for_time(&log, time as u64).await.unwrap();
                assert_eq!(found, expected(time), "{round}: time {time}");
            }
            drop(log);
            log = open_format_two(&dir, 16_384, protocol::batch::TimestampType::Create).await;
        }
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

/// LogAppendTime: the broker's time goes into each batch as it is
/// appended, and a lookup answers a batch's start (every record has its
/// batch's time).
#[test]
fn log_append_time_stamps_the_append_and_lookups_answer_batch_starts() {
    use protocol::batch::write::{BatchWriter, Producer};
    run(|| async {
        let dir = temp_dir("append-time");
        let log = open_format_two(&dir, 1 << 20, protocol::batch::TimestampType::LogAppend).await;
        let mut bases = Vec::new();
        let mut stamped = Vec::new();
        for b in 0..3 {
            let mut writer = BatchWriter::new();
            for r in 0..5 {
                // A producer's clock far in the past: not what is kept.
                writer.push(r, None, Some(format!("{b}-{r}").as_bytes()), &[]);
            }
            let before = now_ms() as i64;
            let (base, _) = log
                .borrow_mut()
                .append(&writer.finish(Producer::NONE), 5)
                .unwrap();
            stamped.push((before, now_ms() as i64));
            bases.push(base);
            // Apart in time, so each batch has its own.
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
        }
        sync_all(&log).await.unwrap();
        let end = log.borrow().end_offset();
        let slice = read(&log, 0, 1 << 20).await.unwrap().unwrap();
        let bytes = slice
            .file
            .read_at(slice.position, slice.len as usize)
            .await
            .unwrap();
        for (i, found) in protocol::batch::produce::batches(&bytes).enumerate() {
            let (at, header) = found.unwrap();
            assert_eq!(at as u64, bases[i]);
            assert_ne!(header.attributes & protocol::batch::ATTR_LOG_APPEND_TIME, 0);
            let (before, after) = stamped[i];
            assert!(
                (before..=after).contains(&header.max_timestamp),
                "batch {i}: {} not in {before}..={after}",
                header.max_timestamp
            );
            let mut scratch = Vec::new();
            let (header, records) =
                protocol::batch::read::decode(&bytes[at..at + header.size], 1 << 20, &mut scratch)
                    .unwrap();
            for record in protocol::batch::read::records(&header, records) {
                assert_eq!(record.unwrap().timestamp, header.max_timestamp);
            }
            let time = header.max_timestamp as u64;
            assert_eq!(offset_for_time(&log, time).await.unwrap(), bases[i]);
        }
        assert_eq!(offset_for_time(&log, 0).await.unwrap(), 0);
        let last = stamped[2].1 as u64;
        assert_eq!(offset_for_time(&log, last + 1).await.unwrap(), end);
        std::fs::remove_dir_all(&dir).unwrap();
    });
}
