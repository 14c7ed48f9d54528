//! A disk that fills up (issue 8, item 17): the broker's data directory on a
//! small tmpfs the test mounts.

use super::util::{produce_raw, raw, read_all};
use harness::{check_numbered_payload, numbered_payload, Broker, BrokerOptions};
use protocol::client::AckMode;
use protocol::ErrorCode;
use std::time::Duration;

const SIZE: usize = 4000;

fn one_message(index: u64) -> Vec<u8> {
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, &numbered_payload(index, SIZE));
    set
}

/// Produces numbered messages one per request until the broker refuses one;
/// returns how many were acknowledged and the refusal.
fn produce_until_refused(
    stream: &mut std::net::TcpStream,
    first: u64,
) -> (u64, protocol::client::ClientError) {
    for i in first..first + 100_000 {
        match produce_raw(stream, "full", 0, AckMode::Written, &one_message(i)) {
            Ok(_) => {}
            Err(error) => return (i - first, error),
        }
    }
    panic!("100,000 messages of {SIZE} bytes fit on a 16 MiB disk");
}

#[test]
fn r8_17_a_full_disk_refuses_writes_keeps_data_readable_and_recovers_once_space_is_freed() {
    let mut broker = Broker::start(BrokerOptions {
        tmpfs_bytes: Some(16 << 20),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    super::util::create(&client, "full", 1);
    // Leave about 1 MiB free.
    let filler = broker.data_dir().join("filler");
    let free = {
        let stat = free_bytes(&broker.data_dir());
        stat.saturating_sub(1 << 20)
    };
    std::fs::write(&filler, vec![0u8; free as usize]).unwrap();
    let metadata = client.metadata(&["full"]).unwrap();
    let owner = client.owner_address(&metadata, "full", 0);
    let other = broker.shards.iter().find(|a| **a != owner).unwrap().clone();
    let mut stream = raw(&owner);
    let (acked, error) = produce_until_refused(&mut stream, 0);
    assert!(acked > 10, "only {acked} messages fit in about 1 MiB");
    assert_eq!(error.code(), Some(ErrorCode::StorageUnavailable), "{error}");
    assert!(
        error.to_string().contains("No space left on device"),
        "the message names the cause: {error}"
    );
    assert!(
        !error.to_string().contains("with fd: Some"),
        "no glommio Debug text in messages: {error}"
    );
    // The broker stays up, and what was acknowledged is readable.
    assert!(broker.is_running());
    // (Written is not yet flushed: the flush policy makes them visible.)
    let stored = harness::eventually("the acknowledged messages", Duration::from_secs(30), || {
        let stored = read_all(&client, "full", 0, 0);
        if stored.len() as u64 == acked {
            Ok(stored)
        } else {
            Err(format!("{} of {acked} visible", stored.len()))
        }
    });
    for (i, m) in stored.iter().enumerate() {
        assert_eq!(check_numbered_payload(&m.value, SIZE), i as u64);
    }
    // Still full: refused again, harmlessly.
    let again = produce_raw(
        &mut stream,
        "full",
        0,
        AckMode::Written,
        &one_message(acked),
    )
    .unwrap_err();
    assert_eq!(again.code(), Some(ErrorCode::StorageUnavailable), "{again}");
    // The Rust client's producer reports the broker's code, retriable.
    {
        // It retries a refusal that passes until its delivery timeout.
        let mut p = protocol::client::Producer::new(
            &client,
            "full",
            protocol::client::ProducerConfig {
                acks: AckMode::Written,
                delivery_timeout: std::time::Duration::from_secs(2),
                ..Default::default()
            },
        )
        .unwrap();
        p.send_to(0, None, &numbered_payload(acked, SIZE)).unwrap();
        let error = p.flush().unwrap_err();
        assert_eq!(error.code(), Some(ErrorCode::StorageUnavailable), "{error}");
        assert!(error.is_retriable(), "{error}");
        assert!(
            error.to_string().contains("No space left on device"),
            "{error}"
        );
    }
    // A fire-and-forget produce is told too, also through the shard that
    // does not own the partition (before, only the broker's log heard of
    // it: issue 8, item 12).
    // The refusals come within the partition's 1 s retry window: let the
    // window the producer's retries left expire, then open a fresh one
    // with a write that fails.
    std::thread::sleep(Duration::from_millis(1_100));
    let fresh = produce_raw(
        &mut stream,
        "full",
        0,
        AckMode::Written,
        &one_message(acked),
    )
    .unwrap_err();
    assert_eq!(fresh.code(), Some(ErrorCode::StorageUnavailable), "{fresh}");
    for address in [&owner, &other] {
        let mut s = raw(address);
        let silent =
            produce_raw(&mut s, "full", 0, AckMode::None, &one_message(acked)).unwrap_err();
        assert_eq!(
            silent.code(),
            Some(ErrorCode::StorageUnavailable),
            "acks=none through {address}: {silent}"
        );
    }
    // Space freed: writes resume without a restart (after the partition's
    // retry back-off).
    std::fs::remove_file(&filler).unwrap();
    harness::eventually("writes resume", Duration::from_secs(30), || {
        produce_raw(
            &mut stream,
            "full",
            0,
            AckMode::Flushed,
            &one_message(acked),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    });
    for i in acked + 1..acked + 100 {
        produce_raw(&mut stream, "full", 0, AckMode::Flushed, &one_message(i)).unwrap();
    }
    // Every acknowledged message exactly once, in order, no gap where the
    // refused ones were; and the same after a restart.
    for round in 0..2 {
        let stored = read_all(&broker.client(), "full", 0, 0);
        assert_eq!(stored.len() as u64, acked + 100, "round {round}");
        for (i, m) in stored.iter().enumerate() {
            assert_eq!(check_numbered_payload(&m.value, SIZE), i as u64);
        }
        if round == 0 {
            drop(stream);
            broker.stop();
            broker.restart();
            stream = raw(&broker.address());
        }
    }
    drop(stream);
}

/// Free bytes of the filesystem holding `dir`.
fn free_bytes(dir: &std::path::Path) -> u64 {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs is plain old data; all zeroes is a valid value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes into the struct we pass; the path is a valid C string.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    assert_eq!(rc, 0, "statvfs {}", dir.display());
    stat.f_bavail * stat.f_frsize
}
