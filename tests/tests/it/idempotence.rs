//! The idempotent producer on real brokers (issue 43, item 6): a numbered
//! batch sent again is answered with the offsets it was stored at and
//! stored once; a gap or an old epoch is refused; the state survives a
//! kill -9 and a graceful restart; a producer resending after its
//! connections were cut stores every message once and in order.

use super::util::read_all;
use harness::{check_numbered_payload, numbered_payload, Broker, BrokerOptions};
use protocol::batch::write::{BatchWriter, Producer};
use protocol::client::{
    AckMode, Client, ClientError, Connection, OffsetSpec, ProducerConfig, TopicSettings,
};
use protocol::codec;
use protocol::frame::{Api, FramePrefix, FRAME_PREFIX_BYTES};
use protocol::ErrorCode;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn format_two() -> TopicSettings {
    TopicSettings {
        message_format: 2,
        ..TopicSettings::default()
    }
}

/// A batch of `count` records numbered under `producer`.
fn numbered(producer: Producer, count: u64) -> Vec<u8> {
    let mut writer = BatchWriter::new();
    for n in 0..count {
        writer.push(
            1_700_000_000_000,
            None,
            Some(format!("seq {} + {n}", producer.base_sequence).as_bytes()),
            &[],
        );
    }
    writer.finish(producer)
}

/// Produces `bytes` to partition 0: the offsets answered.
fn produce(conn: &mut Connection, topic: &str, bytes: &[u8]) -> Result<(u64, u64), ClientError> {
    let header = codec::produce_request(&mut conn.fbb, topic, 0, AckMode::Flushed).to_vec();
    let answer = conn.call(Api::Produce, &header, bytes)?;
    let ack = codec::verify::<protocol::wire::ProduceResponse>(&answer.header).unwrap();
    Ok((ack.base_offset(), ack.end_offset()))
}

fn end_offset(client: &Client, topic: &str) -> u64 {
    client
        .list_offsets(topic, 0, OffsetSpec::Latest, 0)
        .unwrap()
        .1
        .end_offset
}

fn refused(result: Result<(u64, u64), ClientError>, code: ErrorCode, words: &str) {
    let error = result.unwrap_err();
    assert_eq!(error.code(), Some(code), "{error}");
    assert!(error.to_string().contains(words), "{error}");
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one partition's producer state through every rule, a kill -9 and a graceful restart"
)]
fn a_numbered_batch_sent_again_is_stored_once_and_gaps_and_old_epochs_are_refused_across_restarts()
{
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    client.create_topic("i", 1, &format_two()).unwrap();
    let first = client.init_producer_id("i").unwrap();
    let second = client.init_producer_id("i").unwrap();
    assert_ne!(first.id, second.id, "every producer its own id");
    assert_eq!((first.epoch, second.epoch), (0, 0));
    let pid = first.id;
    let at = |epoch: i16, base_sequence: i32| Producer {
        id: pid,
        epoch,
        base_sequence,
    };
    let mut conn = Connection::connect(&broker.address()).unwrap();

    let b0 = numbered(at(0, 0), 3);
    let b1 = numbered(at(0, 3), 2);
    let stored0 = produce(&mut conn, "i", &b0).unwrap();
    assert_eq!(stored0, (0, b0.len() as u64));
    assert_eq!(produce(&mut conn, "i", &b0).unwrap(), stored0, "a retry");
    let stored1 = produce(&mut conn, "i", &b1).unwrap();
    assert_eq!(stored1.0, stored0.1);
    assert_eq!(produce(&mut conn, "i", &b1).unwrap(), stored1);
    assert_eq!(
        produce(&mut conn, "i", &b0).unwrap(),
        stored0,
        "one of the last five"
    );
    let end = end_offset(&client, "i");
    assert_eq!(end, stored1.1, "each stored once");

    refused(
        produce(&mut conn, "i", &numbered(at(0, 10), 1)),
        ErrorCode::OutOfOrderSequence,
        "sequence 10 where 5 is next",
    );
    refused(
        produce(&mut conn, "i", &numbered(at(1, 4), 1)),
        ErrorCode::OutOfOrderSequence,
        "where 0 is next",
    );
    // Another producer id starts wherever it likes (its earlier batches
    // may be gone with retention), and does not disturb this one.
    let other = Producer {
        id: second.id,
        epoch: 0,
        base_sequence: 77,
    };
    let stored_other = produce(&mut conn, "i", &numbered(other, 1)).unwrap();
    // Two batches in one request, one numbered: refused whole.
    let mut two = numbered(at(0, 5), 1);
    two.extend_from_slice(&numbered(Producer::NONE, 1));
    refused(
        produce(&mut conn, "i", &two),
        ErrorCode::CorruptMessage,
        "must be the only one",
    );
    // A new epoch starts at 0 and fences the old one.
    let e1 = numbered(at(1, 0), 4);
    let stored_e1 = produce(&mut conn, "i", &e1).unwrap();
    refused(
        produce(&mut conn, "i", &numbered(at(0, 5), 1)),
        ErrorCode::InvalidProducerEpoch,
        "is fenced",
    );
    let end = end_offset(&client, "i");
    assert_eq!(end, stored_e1.1, "nothing refused was stored");

    // The state is the log's: rebuilt from its batch headers after a
    // kill -9 (no snapshot was written: far less than 64 MiB), from the
    // snapshot after a graceful stop.
    broker.kill9();
    broker.restart();
    let mut conn = Connection::connect(&broker.address()).unwrap();
    assert_eq!(
        produce(&mut conn, "i", &e1).unwrap(),
        stored_e1,
        "after a kill -9"
    );
    assert_eq!(
        produce(&mut conn, "i", &numbered(other, 1)).unwrap(),
        stored_other
    );
    refused(
        produce(&mut conn, "i", &numbered(at(1, 9), 1)),
        ErrorCode::OutOfOrderSequence,
        "where 4 is next",
    );
    let e1_next = numbered(at(1, 4), 1);
    let stored_next = produce(&mut conn, "i", &e1_next).unwrap();
    assert_eq!(stored_next.0, end);
    broker.stop();
    let snapshot = broker.data_dir().join("i-0").join("producers");
    assert!(snapshot.exists(), "a graceful stop writes {snapshot:?}");
    broker.restart();
    let client = broker.client();
    let mut conn = Connection::connect(&broker.address()).unwrap();
    assert_eq!(
        produce(&mut conn, "i", &e1_next).unwrap(),
        stored_next,
        "after a graceful restart"
    );
    assert_eq!(end_offset(&client, "i"), stored_next.1);
    // A damaged snapshot is not trusted: the log is read instead.
    broker.stop();
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&snapshot, bytes).unwrap();
    broker.restart();
    let client = broker.client();
    let mut conn = Connection::connect(&broker.address()).unwrap();
    assert_eq!(produce(&mut conn, "i", &e1_next).unwrap(), stored_next);
    // Ids handed out before the restarts are never handed out again.
    let later = client.init_producer_id("i").unwrap();
    assert!(later.id > second.id, "{later:?} after {second:?}");
}

/// A TCP proxy in front of `target` that, on each connection, forwards
/// the first `answers` response frames and then closes both sides
/// instead of forwarding the next one — `cuts` times in all, after which
/// it forwards everything. The produce whose answer it drops was stored.
struct Cutter {
    address: String,
    cut: Arc<AtomicU32>,
}

impl Cutter {
    fn start(target: String, answers: u32, cuts: u32) -> Cutter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicU32::new(0));
        let made = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let made = made.clone();
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_read, &mut s_write);
                    let _ = s_write.shutdown(Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let (mut server, mut client) = (server, client);
                    let mut forwarded = 0;
                    loop {
                        let mut prefix = [0u8; FRAME_PREFIX_BYTES];
                        if server.read_exact(&mut prefix).is_err() {
                            break;
                        }
                        let Ok(frame) = FramePrefix::parse(&prefix, 1 << 30) else {
                            break;
                        };
                        let mut rest = vec![0u8; frame.frame_bytes - FRAME_PREFIX_BYTES];
                        if server.read_exact(&mut rest).is_err() {
                            break;
                        }
                        let cutting = forwarded == answers
                            && made
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                    (n < cuts).then_some(n + 1)
                                })
                                .is_ok();
                        if cutting {
                            break;
                        }
                        if client.write_all(&prefix).is_err() || client.write_all(&rest).is_err() {
                            break;
                        }
                        forwarded += 1;
                    }
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                });
            }
        });
        Cutter { address, cut }
    }
}

/// Sends `total` numbered messages through a proxy that cuts the
/// connection before `cuts` answers reach the producer; returns how many
/// times each message is stored, in log order, and the cuts made.
fn send_through_cuts(broker: &Broker, topic: &str, idempotence: bool) -> (Vec<u64>, u32) {
    const TOTAL: u64 = 20_000;
    const CUTS: u32 = 8;
    let client = broker.client();
    client.create_topic(topic, 1, &format_two()).unwrap();
    // Each connection: its handshake's and a few produces' answers, then
    // the cut.
    let cutter = Cutter::start(broker.address(), 6, CUTS);
    let through = Client::connect(&cutter.address).unwrap();
    let mut producer = protocol::client::Producer::new(
        &through,
        topic,
        ProducerConfig {
            acks: AckMode::Written,
            batch_messages: 100,
            // An idempotent producer's batches grow while five are on the
            // wire: kept small, there are hundreds of requests to cut.
            batch_bytes: 4096,
            linger: Duration::from_millis(1),
            shard_aware: false,
            idempotence,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    assert_eq!(producer.producer_id().is_some(), idempotence);
    for n in 0..TOTAL {
        producer
            .send_to(0, None, &numbered_payload(n, 32))
            .unwrap_or_else(|e| panic!("send {n}: {e}"));
    }
    producer.close(Duration::from_secs(60)).unwrap();
    let stored: Vec<u64> = read_all(&client, topic, 0, 0)
        .iter()
        .map(|m| check_numbered_payload(&m.value, 32))
        .collect();
    (stored, cutter.cut.load(Ordering::SeqCst))
}

#[test]
fn a_producer_resending_after_cut_connections_stores_every_message_once_and_in_order() {
    let broker = Broker::start(BrokerOptions {
        metrics: true,
        ..BrokerOptions::default()
    });
    let (stored, cuts) = send_through_cuts(&broker, "once", true);
    assert!(cuts >= 4, "the proxy cut {cuts} answers");
    assert_eq!(
        stored,
        (0..20_000).collect::<Vec<u64>>(),
        "every message once, in order"
    );
    // The resends met batches stored already, and were answered with
    // their offsets.
    let metrics = super::util::scrape(broker.metrics.as_deref().unwrap());
    let duplicates = super::util::metric(&metrics, "ringlog_produce_duplicates_total");
    eprintln!("idempotent: {cuts} answers cut, {duplicates} resent batches found stored");
    assert!(duplicates >= 1, "{duplicates} duplicates answered");
    // Without the numbers the same cuts store batches twice: the test
    // above can fail.
    let (stored, cuts) = send_through_cuts(&broker, "twice", false);
    assert!(cuts >= 4, "the proxy cut {cuts} answers");
    let distinct: std::collections::BTreeSet<u64> = stored.iter().copied().collect();
    assert_eq!(distinct.len(), 20_000, "nothing lost either way");
    eprintln!(
        "not idempotent: {cuts} answers cut, {} messages stored for 20000 sent",
        stored.len()
    );
    assert!(
        stored.len() > 20_000,
        "resent batches are stored again without idempotence ({} stored)",
        stored.len()
    );
}

#[test]
fn leaders_killed_under_an_idempotent_producer_lose_nothing_store_nothing_twice_and_keep_the_order()
{
    use super::replication::{cluster, metadata, replicated, wait_identical};
    const TOTAL: u64 = 100_000;
    let etcd = harness::etcd::Etcd::start();
    let mut brokers = cluster(&etcd, "idem", 3);
    let client = brokers[0].client();
    let settings = TopicSettings {
        message_format: 2,
        ..replicated(3, 2)
    };
    client.create_topic("idem", 1, &settings).unwrap();
    let mut producer = protocol::client::Producer::new(
        &client,
        "idem",
        ProducerConfig {
            acks: AckMode::All,
            batch_messages: 100,
            linger: Duration::from_millis(2),
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    assert!(producer.producer_id().is_some(), "idempotent by default");
    // The partition's leader dies three times mid-stream (kill -9); each
    // comes back before the next dies.
    let mut killed: Option<usize> = None;
    let mut kills = Vec::new();
    for n in 0..TOTAL {
        if n % 25_000 == 20_000 {
            if let Some(back) = killed.take() {
                brokers[back].restart();
            }
            let live = brokers.iter().position(|b| b.pid().is_some()).unwrap();
            let leader =
                metadata(&brokers[live].client(), "idem").topics[0].partitions[0].broker_id;
            let victim = brokers
                .iter()
                .position(|b| b.options().broker_id == leader)
                .unwrap();
            brokers[victim].kill9();
            killed = Some(victim);
            kills.push(leader);
        }
        producer
            .send_to(0, None, &numbered_payload(n, 32))
            .unwrap_or_else(|e| panic!("send {n}: {e}"));
    }
    producer.close(Duration::from_secs(120)).unwrap();
    if let Some(back) = killed.take() {
        brokers[back].restart();
    }
    let client = brokers[0].client();
    let now = metadata(&client, "idem").topics[0].partitions[0].clone();
    let stored: Vec<u64> = read_all(&client, "idem", 0, 0)
        .iter()
        .map(|m| check_numbered_payload(&m.value, 32))
        .collect();
    let distinct: std::collections::BTreeSet<u64> = stored.iter().copied().collect();
    eprintln!(
        "leaders {kills:?} killed in turn: {} stored, {} distinct, leader now {} in epoch {}",
        stored.len(),
        distinct.len(),
        now.broker_id,
        now.leader_epoch
    );
    assert_eq!(
        stored,
        (0..TOTAL).collect::<Vec<u64>>(),
        "0 lost, 0 duplicated, in order"
    );
    let refs: Vec<&Broker> = brokers.iter().collect();
    wait_identical(&refs, "idem", 0);
}
