//! Hostile connections cannot pin the broker's memory or hold connections
//! forever (issue 8, items 1 and 2).

use super::util::{create, metric, raw, read_all, scrape, socket};
use harness::{Broker, BrokerOptions};
use protocol::client::{read_response, AckMode, ResponseFrame};
use protocol::codec::{self, FetchArgs};
use protocol::frame::{self, Api, API_VERSION};
use protocol::ErrorCode;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A 16-byte request prefix that declares a frame of `frame_bytes`.
fn prefix(frame_bytes: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((frame_bytes - 4) as u32).to_le_bytes());
    out.extend_from_slice(&(Api::Produce as u16).to_le_bytes());
    out.extend_from_slice(&API_VERSION.to_le_bytes());
    out.extend_from_slice(&7u32.to_le_bytes());
    out.extend_from_slice(&64u32.to_le_bytes());
    out
}

/// `count` pipelined Metadata requests for `topics`, request ids 0, 1, ….
fn metadata_frames(topics: &[&str], count: u32) -> Vec<u8> {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let header = codec::metadata_request(&mut fbb, topics).to_vec();
    let mut frames = Vec::new();
    for i in 0..count {
        frame::write_frame(
            &mut frames,
            Api::Metadata as u16,
            API_VERSION,
            i,
            &header,
            &[],
        );
    }
    frames
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// True when the broker closed the connection (EOF), within the read timeout.
fn closed_by_broker(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0))
}

/// Item 1: 64 connections that each declared a 16 MiB frame in 16 bytes
/// took the broker from 8 MB to 1,041 MB RSS.
#[test]
fn r8_1_sixteen_bytes_no_longer_pin_sixteen_mebibytes() {
    let broker = Broker::start(BrokerOptions::default());
    let pid = broker.pid().unwrap();
    // Settle start-up allocations with one round trip per shard.
    for address in &broker.shards {
        protocol::client::Client::connect(address)
            .unwrap()
            .metadata(&[])
            .unwrap();
    }
    let before = rss_kib(pid);
    let mut held = Vec::new();
    for i in 0..64 {
        let address = &broker.shards[i % broker.shards.len()];
        let mut stream = raw(address);
        stream.write_all(&prefix(16 * 1024 * 1024)).unwrap();
        held.push(stream);
    }
    // Before a handshake, even the declaration is refused.
    let mut stranger = socket(&broker.address());
    stranger.write_all(&prefix(16 * 1024 * 1024)).unwrap();
    let error = read_response(&mut stranger, &mut ResponseFrame::default()).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::FrameTooLarge), "{error}");
    // A round trip per shard after the prefixes: their reads have run.
    for address in &broker.shards {
        protocol::client::Client::connect(address)
            .unwrap()
            .metadata(&[])
            .unwrap();
    }
    let after = rss_kib(pid);
    eprintln!(
        "RSS {before} KiB before, {after} KiB with 64 connections holding a 16 MiB frame's prefix"
    );
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} to {after} KiB"
    );
}

/// Item 2: connections that send nothing, half a prefix, or go idle are
/// closed on their deadlines; one waiting for a long-poll is not idle.
#[test]
fn r8_2_silent_trickling_and_idle_connections_are_closed_on_their_deadlines() {
    let broker = Broker::start(BrokerOptions {
        config_toml: "handshake_timeout_ms = 300\nidle_timeout_ms = 1000\nframe_timeout_ms = 300\n"
            .into(),
        ..BrokerOptions::default()
    });
    create(&broker.client(), "quiet", 1);
    // Never a handshake (100 of them).
    let silent: Vec<TcpStream> = (0..100).map(|_| socket(&broker.address())).collect();
    // Half a prefix after the handshake: slowloris.
    let trickling: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = raw(&broker.address());
            stream.write_all(&prefix(1024)[..8]).unwrap();
            stream
        })
        .collect();
    // Handshaken, then nothing.
    let mut idle = raw(&broker.address());
    // A long-poll longer than the idle timeout: answered, not cut off.
    let mut polling = raw(&broker.address());
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let header = codec::fetch_request(
        &mut fbb,
        "quiet",
        0,
        FetchArgs {
            offset: 0,
            max_bytes: 1024,
            max_wait_ms: 2_500,
        },
    )
    .to_vec();
    let mut out = Vec::new();
    frame::write_frame(&mut out, Api::Fetch as u16, API_VERSION, 9, &header, &[]);
    polling.write_all(&out).unwrap();

    let mut response = ResponseFrame::default();
    read_response(&mut polling, &mut response).unwrap();
    assert_eq!(response.request_id, 9, "the long-poll was answered");
    let mut silent = silent;
    let closed = silent
        .iter_mut()
        .map(closed_by_broker)
        .filter(|c| *c)
        .count();
    assert_eq!(closed, 100, "connections without a handshake");
    let mut trickling = trickling;
    let closed = trickling
        .iter_mut()
        .map(closed_by_broker)
        .filter(|c| *c)
        .count();
    assert_eq!(closed, 20, "connections trickling a frame");
    assert!(closed_by_broker(&mut idle), "an idle connection");
    assert!(closed_by_broker(&mut polling), "idle after its long-poll");
    // The broker serves on.
    broker.client().metadata(&[]).unwrap();
}

/// Item 3: 1,100 idle connections took every descriptor; new clients hung
/// and partitions failed to open segments. Past `max_connections` a new
/// connection gets one OVERLOADED frame and is closed.
#[test]
fn r8_3_connections_past_max_connections_are_refused_politely() {
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        config_toml: "max_connections = 4\n".into(),
        ..BrokerOptions::default()
    });
    let mut held: Vec<TcpStream> = (0..4).map(|_| raw(&broker.address())).collect();
    let mut refused = socket(&broker.address());
    let error = read_response(&mut refused, &mut ResponseFrame::default()).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::Overloaded), "{error}");
    assert!(error.to_string().contains("max_connections"), "{error}");
    assert!(closed_by_broker(&mut refused));
    // One leaves; a slot is free again.
    drop(held.pop());
    harness::eventually("a free slot", std::time::Duration::from_secs(30), || {
        let mut stream = socket(&broker.address());
        super::util::handshake(&mut stream, API_VERSION, 0)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
}

/// Issue 8, item 3: with the open-files limit at 1,024, 1,100 idle
/// connections took every descriptor; segment opens failed with EMFILE and
/// the partition refused writes until a restart. Now `max_connections` is
/// lowered at start to leave `fd_reserve` descriptors for storage: the flood
/// is refused politely and a producer rolling a new segment every request
/// never notices.
#[test]
fn r8_3_an_idle_connection_flood_cannot_take_the_descriptors_storage_needs() {
    let limit = 600;
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        metrics: true,
        nofile: Some(limit),
        config_toml: "segment_bytes_min = 1024\nfd_reserve = 256\n".into(),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    let small = protocol::client::TopicSettings {
        segment_bytes: 1024,
        ..Default::default()
    };
    client.create_topic("busy", 1, &small).unwrap();
    let mut p = super::util::producer(&client, "busy", AckMode::Flushed, 1);
    p.send_to(0, None, &harness::numbered_payload(0, 900))
        .unwrap();
    p.flush().unwrap();
    // More idle connections than the limit allows descriptors.
    let flood: Vec<TcpStream> = (0..limit + 100)
        .map(|_| TcpStream::connect(broker.address()).unwrap())
        .collect();
    let metrics_address = broker.metrics.clone().unwrap();
    let (accepted, refused) = harness::eventually(
        "the flood accepted or refused",
        Duration::from_secs(30),
        || {
            let text = scrape(&metrics_address);
            let accepted = metric(&text, "ringlog_connections_accepted_total");
            let refused = metric(&text, "ringlog_connections_refused_total");
            if accepted + refused >= flood.len() as u64 + 2 {
                Ok((accepted, refused))
            } else {
                Err(format!("{accepted} accepted, {refused} refused"))
            }
        },
    );
    eprintln!("RLIMIT_NOFILE {limit}: {accepted} connections accepted, {refused} refused");
    assert!(refused > 100, "{refused} refused");
    // Each message rolls a segment (a new file) while the flood holds on.
    for i in 1..300u64 {
        p.send_to(0, None, &harness::numbered_payload(i, 900))
            .unwrap_or_else(|e| panic!("produce {i} during the flood: {e}"));
    }
    p.flush().unwrap();
    create(&client, "created-during-the-flood", 1);
    // The flood leaves; new connections are served again, and every
    // message is there.
    drop(flood);
    harness::eventually("a free slot", Duration::from_secs(30), || {
        let mut stream = socket(&broker.address());
        super::util::handshake(&mut stream, API_VERSION, 0)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let stored = read_all(&client, "busy", 0, 0);
    assert_eq!(stored.len(), 300);
    for (i, m) in stored.iter().enumerate() {
        assert_eq!(harness::check_numbered_payload(&m.value, 900), i as u64);
    }
}

/// A limit that leaves nothing for connections after `fd_reserve` is
/// refused at start with the numbers.
#[test]
fn r8_3_an_open_files_limit_below_the_reserve_is_refused_at_start() {
    let data = harness::TempDir::new("nofile");
    let mut command = std::process::Command::new(harness::binary("broker"));
    command
        .arg("--data-dir")
        .arg(data.path())
        .args(["--listen", "127.0.0.1:0", "--shards", "1"]);
    harness::set_nofile_in_child(&mut command, 300);
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it started: {stderr}");
    assert!(
        stderr.contains("RLIMIT_NOFILE is 300") && stderr.contains("fd_reserve 1024"),
        "{stderr}"
    );
}

/// Sends `frames` produces of 8 messages of 1,000,000 bytes each (acks =
/// written) to `topic`-`partition` through `address`, from one thread per
/// address, and samples the broker's RSS until every one is acknowledged.
/// Returns the peak RSS in KiB.
fn pump_and_watch_rss(
    broker: &Broker,
    addresses: &[String],
    topic: &str,
    partitions: &[u32],
    frames: usize,
) -> u64 {
    let pid = broker.pid().unwrap();
    let mut set = Vec::new();
    for _ in 0..8 {
        protocol::message::encode_message(&mut set, None, &vec![7u8; 1_000_000]);
    }
    let set = std::sync::Arc::new(set);
    let workers: Vec<_> = addresses
        .iter()
        .zip(partitions)
        .map(|(address, &partition)| {
            let (address, topic, set) = (address.clone(), topic.to_string(), set.clone());
            std::thread::spawn(move || {
                let mut stream = raw(&address);
                let mut writer = stream.try_clone().unwrap();
                let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
                let header =
                    codec::produce_request(&mut fbb, &topic, partition, AckMode::Written).to_vec();
                // Write everything at once (pipelined), read the answers after.
                let sender = std::thread::spawn(move || {
                    for i in 0..frames {
                        let mut out = Vec::new();
                        frame::write_frame(
                            &mut out,
                            Api::Produce as u16,
                            API_VERSION,
                            i as u32,
                            &header,
                            &set,
                        );
                        writer.write_all(&out).unwrap();
                    }
                });
                stream
                    .set_read_timeout(Some(Duration::from_secs(120)))
                    .unwrap();
                let mut response = ResponseFrame::default();
                for i in 0..frames {
                    read_response(&mut stream, &mut response)
                        .unwrap_or_else(|e| panic!("produce {i} to {address}: {e}"));
                }
                sender.join().unwrap();
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let mut peak = 0;
    while workers.iter().any(|w| !w.is_finished()) {
        assert!(std::time::Instant::now() < deadline, "the producers hang");
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    for worker in workers {
        worker.join().unwrap();
    }
    peak
}

/// Settles start-up allocations, then the RSS in KiB.
fn settled_rss(broker: &Broker) -> u64 {
    for address in &broker.shards {
        protocol::client::Client::connect(address)
            .unwrap()
            .metadata(&[])
            .unwrap();
    }
    rss_kib(broker.pid().unwrap())
}

/// Item 6: forwarded produces held their copies until the connection got
/// round to them — 60 × 8 MiB behind one long-poll held +490 MiB. Now a
/// connection stops reading once `connection_inflight_bytes_max` of its
/// requests await answers: 40 × 8 MiB forwarded to a shard whose disk is
/// slow (each write waits 100 ms, and the owner's unwritten budget is
/// small) stay within that bound.
#[test]
fn r8_6_forwarded_produces_are_bounded_in_bytes_per_connection() {
    let broker = Broker::start(BrokerOptions {
        faults: Some("write_delay_ms=100".into()),
        config_toml: "connection_inflight_bytes_max = 33554432\nunwritten_bytes_max = 33554432\n"
            .into(),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    create(&client, "far", 2);
    let metadata = client.metadata(&["far"]).unwrap();
    // A partition owned by shard 1, produced to through shard 0.
    let partition = (0..2)
        .find(|&p| client.owner_address(&metadata, "far", p) == broker.shards[1])
        .expect("a partition on shard 1");
    let before = settled_rss(&broker);
    let peak = pump_and_watch_rss(
        &broker,
        &[broker.shards[0].clone()],
        "far",
        &[partition],
        40,
    );
    eprintln!("RSS {before} KiB before, peak {peak} KiB while 40 × 8 MiB were forwarded");
    assert!(
        peak < before + 200 * 1024,
        "RSS grew from {before} to {peak} KiB"
    );
    let stored = read_all(&client, "far", partition, 0);
    assert_eq!(stored.len(), 40 * 8);
}

/// Item 14: only acks=none was held back, and per partition. Now every
/// produce waits while its shard's unwritten bytes exceed its share of
/// `unwritten_bytes_max`: eight pipelining producers of 12 × 8 MiB each
/// (acks = written) on one shard whose disk is slow stay near the budget,
/// where before each connection could park 64 MiB.
#[test]
fn r8_14_unwritten_bytes_are_bounded_for_the_whole_shard_in_every_ack_mode() {
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        faults: Some("write_delay_ms=20".into()),
        config_toml: "unwritten_bytes_max = 33554432\n".into(),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    create(&client, "wide", 8);
    let before = settled_rss(&broker);
    let addresses = vec![broker.address(); 8];
    let partitions: Vec<u32> = (0..8).collect();
    let peak = pump_and_watch_rss(&broker, &addresses, "wide", &partitions, 12);
    eprintln!("RSS {before} KiB before, peak {peak} KiB with 8 producers × 12 × 8 MiB");
    assert!(
        peak < before + 250 * 1024,
        "RSS grew from {before} to {peak} KiB"
    );
    for p in 0..8 {
        assert_eq!(
            read_all(&client, "wide", p, 0).len(),
            12 * 8,
            "partition {p}"
        );
    }
}

/// Item 7: Metadata of thousands of partitions is cheap to ask for and
/// large to answer; 4,000 pipelined requests from a client that never read
/// held ~400 MB of responses. Response headers waiting to be written now
/// count in `connection_inflight_bytes_max`, so the connection stops
/// reading instead — and the shard keeps serving others meanwhile.
#[test]
fn r8_7_pipelined_metadata_is_bounded_by_the_connection_byte_limit() {
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        config_toml: "connection_inflight_bytes_max = 16777216\n".into(),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    create(&client, "wide", 8_000);
    let one = client.metadata(&[]).unwrap();
    assert_eq!(one.topics[0].partitions.len(), 8_000);
    // Every partition was opened (a shard opens them many at a time), the
    // last as well as the first.
    for partition in [0, 3_999, 7_999] {
        let mut p = super::util::producer(&client, "wide", AckMode::Flushed, 1);
        p.send_to(partition, None, b"opened").unwrap();
        p.flush().unwrap();
        assert_eq!(p.acked_messages(), 1, "partition {partition}");
    }
    let before = settled_rss(&broker);
    // 4,000 Metadata(all) requests, pipelined, never read.
    let mut greedy = raw(&broker.address());
    let frames = metadata_frames(&[], 4_000);
    // (160 KB: the socket buffers take it all, whether the broker reads
    // or not.)
    let writer = std::thread::spawn(move || {
        let _ = greedy.write_all(&frames);
        greedy
    });
    // Meanwhile the shard answers another client.
    let mut p = super::util::producer(&client, "wide", AckMode::Flushed, 1);
    for i in 0..20u64 {
        p.send_to(7, None, &harness::numbered_payload(i, 100))
            .unwrap();
        p.flush().unwrap();
    }
    let mut peak = 0;
    for _ in 0..50 {
        peak = peak.max(rss_kib(broker.pid().unwrap()));
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "RSS {before} KiB before, peak {peak} KiB with 4,000 Metadata of 8,000 partitions unread"
    );
    assert!(
        peak < before + 120 * 1024,
        "RSS grew from {before} to {peak} KiB"
    );
    drop(p);
    drop(client);
    drop(broker);
    let _ = writer.join();
}

/// `max_request_bytes` and `max_inflight_requests` are configuration:
/// a frame past the first is refused, and a tiny in-flight limit still
/// answers every pipelined request, in order.
#[test]
fn r8_20_request_size_and_inflight_limits_are_configuration() {
    let broker = Broker::start(BrokerOptions {
        config_toml:
            "max_request_bytes = 65536\nmax_inflight_requests = 2\nmessage_bytes_max = 32768\n"
                .into(),
        ..BrokerOptions::default()
    });
    create(&broker.client(), "small", 1);
    let mut stream = raw(&broker.address());
    let frames = metadata_frames(&["small"], 50);
    stream.write_all(&frames).unwrap();
    let mut response = ResponseFrame::default();
    for i in 0..50u32 {
        read_response(&mut stream, &mut response).unwrap();
        assert_eq!(response.request_id, i);
    }
    stream.write_all(&prefix(100_000)).unwrap();
    let error = read_response(&mut stream, &mut response).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::FrameTooLarge), "{error}");
}

/// Issue 9, item 2: a client may write to more partitions than the broker
/// has descriptors for. Before, every segment open past RLIMIT_NOFILE failed
/// with EMFILE: writes were refused and retried, a flush that could not open
/// its directory poisoned the partition until a restart, and the log took a
/// line per partition per tick. Now each shard keeps at most its share of
/// descriptors as segment files and closes the least recently used idle ones
/// to open another: every message is stored and nothing is refused.
#[test]
fn more_partitions_than_descriptors_close_idle_files_and_lose_nothing() {
    let limit = 600;
    let partitions = 700u32;
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        metrics: true,
        nofile: Some(limit),
        // Segment files get what connections cannot take, less 64 for the
        // control plane: about 600 - 75 in use at start - 200 - 64 = 260.
        config_toml: "fd_reserve = 256\nmax_connections = 200\n".into(),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    create(&client, "wide", partitions);
    let mut p = super::util::producer(&client, "wide", AckMode::Flushed, 1);
    let rounds = 3u64;
    for i in 0..rounds * u64::from(partitions) {
        let partition = (i % u64::from(partitions)) as u32;
        p.send_to(partition, None, &harness::numbered_payload(i, 100))
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    p.flush()
        .unwrap_or_else(|e| panic!("every message stored: {e}"));
    // Metrics are published every few hundred milliseconds.
    let evicted = harness::eventually("files closed early", Duration::from_secs(10), || {
        let text = scrape(broker.metrics.as_ref().unwrap());
        match metric(&text, "ringlog_segment_files_evicted_total") {
            0 => Err("none yet".to_string()),
            n => Ok(n),
        }
    });
    let text = scrape(broker.metrics.as_ref().unwrap());
    let (files, files_max) = (
        metric(&text, "ringlog_segment_files_open"),
        metric(&text, "ringlog_segment_files_max"),
    );
    assert!(
        files_max > 0 && files <= files_max,
        "{files} segment files open, at most {files_max}"
    );
    let open = std::fs::read_dir(format!("/proc/{}/fd", broker.pid().unwrap()))
        .unwrap()
        .count();
    eprintln!("{partitions} partitions, RLIMIT_NOFILE {limit}: {evicted} files closed early, {files} of at most {files_max} open, {open} descriptors");
    assert!(open < limit as usize, "{open} descriptors open");
    for partition in 0..partitions {
        let stored = read_all(&client, "wide", partition, 0);
        let numbers: Vec<u64> = stored
            .iter()
            .map(|m| harness::check_numbered_payload(&m.value, 100))
            .collect();
        let expected: Vec<u64> = (0..rounds)
            .map(|r| r * u64::from(partitions) + u64::from(partition))
            .collect();
        assert_eq!(numbers, expected, "partition {partition}");
    }
    let log = broker.log();
    for bad in [
        "Too many open files",
        "poisoned",
        "transient storage failure",
    ] {
        assert!(!log.contains(bad), "the log says {bad:?}:\n{log}");
    }
}
