//! Issue 9, item 1: a fetch of bytes that are not in the page cache must not
//! block its shard. `sendfile` read misses from disk on the shard's thread;
//! now they are read on the blocking pool while the shard serves others.

use super::util::{create, metric, producer, scrape};
use harness::{Broker, BrokerOptions};
use protocol::client::{AckMode, Connection};
use protocol::codec::{self, FetchArgs};
use protocol::frame::Api;
use std::os::fd::AsRawFd;

/// Pages of `path` in the page cache (cachestat(2)).
fn cached_pages(path: &std::path::Path) -> u64 {
    let file = std::fs::File::open(path).unwrap();
    let range = [0u64, 0u64]; // the whole file
    let mut stat = [0u64; 5];
    // SAFETY: cachestat reads `range` and writes `stat`, both valid.
    let result = unsafe {
        libc::syscall(
            451,
            file.as_raw_fd(),
            range.as_ptr(),
            stat.as_mut_ptr(),
            0u32,
        )
    };
    assert_eq!(result, 0, "cachestat: {}", std::io::Error::last_os_error());
    stat[0]
}

/// Drops the clean cached pages of a file (what a cold consumer meets).
fn evict(path: &std::path::Path) {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: advice on an open descriptor; no memory is passed.
    let result = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(result, 0);
}

#[test]
fn a_fetch_from_disk_does_not_stop_the_other_connections_of_its_shard() {
    // Every read of uncached fetch bytes takes 3 s longer: a very slow disk.
    let broker = Broker::start(BrokerOptions {
        faults: Some("cold_read_delay_ms=3000".into()),
        metrics: true,
        ..BrokerOptions::default()
    });
    let client = broker.client();
    create(&client, "cold", 1);
    create(&client, "hot", 8);
    let metadata = client.metadata(&["cold", "hot"]).unwrap();
    let cold_shard = metadata.owner_address("cold", 0).unwrap().clone();
    let hot_partition = (0..8)
        .find(|&p| metadata.owner_address("hot", p) == Some(&cold_shard))
        .expect("one of 8 partitions shares the cold partition's shard");
    let address = format!("{}:{}", cold_shard.host, cold_shard.port);

    let mut writer = producer(&client, "cold", AckMode::Flushed, 100);
    for i in 0..4_000u64 {
        writer
            .send_to(0, None, &harness::numbered_payload(i, 200))
            .unwrap();
    }
    writer.flush().unwrap();
    let segment = std::fs::read_dir(broker.data_dir().join("cold-0"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap();
    evict(&segment);
    assert_eq!(cached_pages(&segment), 0, "the segment left the page cache");

    // A: a fetch of the whole (uncached) segment, sent and not yet read.
    let mut cold = Connection::connect(&address).unwrap();
    let header = codec::fetch_request(
        &mut cold.fbb,
        "cold",
        0,
        FetchArgs {
            offset: 0,
            max_bytes: 1 << 20,
            max_wait_ms: 0,
        },
    )
    .to_vec();
    cold.send(Api::Fetch, &header, &[]).unwrap();
    cold.flush().unwrap();

    // B, same shard: produce and metadata round trips go on meanwhile.
    let mut hot = Connection::connect(&address).unwrap();
    for _ in 0..20 {
        let header =
            codec::produce_request(&mut hot.fbb, "hot", hot_partition, AckMode::Written).to_vec();
        let mut set = Vec::new();
        protocol::message::encode_message(&mut set, None, b"hot");
        hot.call(Api::Produce, &header, &set).unwrap();
        let header = codec::metadata_request(&mut hot.fbb, &["hot"]).to_vec();
        hot.call(Api::Metadata, &header, &[]).unwrap();
    }
    // The 40 requests were served while the cold fetch still waited for
    // the disk: of its answer, at most the frame prefix and header have
    // arrived, none of the log bytes. (A shard that blocked on the read
    // would have served them only after sending it all.)
    let socket = cold.socket().unwrap();
    socket.set_nonblocking(true).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let arrived = match socket.peek(&mut buf) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => panic!("peek: {e}"),
    };
    assert!(
        arrived < 1024,
        "{arrived} bytes of the cold fetch's answer came before the other connection's requests were served"
    );
    socket.set_nonblocking(false).unwrap();
    let response = cold.recv().unwrap();
    let expected = 4_000 * (200 + protocol::message::MESSAGE_HEADER_BYTES);
    assert_eq!(response.payload.len(), expected.min(1 << 20));
    // The bytes are the messages, in order.
    let mut n = 0u64;
    for message in protocol::message::MessageSetIter::new(&response.payload, 0) {
        let message = message.unwrap();
        assert_eq!(harness::check_numbered_payload(message.value, 200), n);
        n += 1;
    }
    assert!(n > 0);
    // Counted as cold bytes (the shards' metrics reach the endpoint with a
    // short delay).
    let endpoint = broker.metrics.clone().unwrap();
    harness::eventually(
        "cold bytes counted",
        std::time::Duration::from_secs(10),
        || {
            let cold = metric(&scrape(&endpoint), "ringlog_fetch_cold_bytes_total");
            (cold >= response.payload.len() as u64)
                .then_some(())
                .ok_or(format!("{cold} cold bytes"))
        },
    );
}
