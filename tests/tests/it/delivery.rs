//! Issue 25, item 3: outcomes a producer can trust. A batch's delivery
//! report says `Stored`, `Failed` (certainly not stored) or `Unknown`
//! (perhaps stored: an answer was lost), and a producer's retries are
//! bounded by a deadline, `delivery_timeout`, rather than a count.

use super::util::{create, read_all};
use harness::{check_numbered_payload, free_ports, numbered_payload, Broker, BrokerOptions};
use protocol::client::{
    AckMode, Client, ClientConfig, ClientError, Delivery, Outcome, Producer, ProducerConfig,
};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const SIZE: usize = 48;

fn producer(client: &Client, topic: &str, config: ProducerConfig) -> Producer {
    Producer::new(
        client,
        topic,
        ProducerConfig {
            acks: AckMode::Flushed,
            batch_messages: 50,
            delivery_reports: true,
            ..config
        },
    )
    .unwrap_or_else(|e| panic!("producer: {e}"))
}

/// Sends messages `range` (numbered payloads) to partition 0.
fn send(producer: &mut Producer, range: std::ops::Range<u64>) {
    for i in range {
        producer
            .send_to(0, None, &numbered_payload(i, SIZE))
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
}

/// Messages per outcome: (stored, failed, unknown).
fn tally(deliveries: &[Delivery]) -> (u64, u64, u64) {
    let mut counts = (0, 0, 0);
    for d in deliveries {
        let n = u64::from(d.messages);
        match d.outcome {
            Outcome::Stored(_) => counts.0 += n,
            Outcome::Failed(_) => counts.1 += n,
            Outcome::Unknown(_) => counts.2 += n,
        }
    }
    counts
}

/// The numbers (payload ids) a batch's messages carry: this test's
/// producers send ids in sequence order from `first_id`.
fn ids(delivery: &Delivery, first_id: u64) -> std::ops::Range<u64> {
    let start = first_id + delivery.first_sequence;
    start..start + u64::from(delivery.messages)
}

/// A 16 s outage (the broker SIGKILLed, restarted 16 s later) failed a
/// third of a run: the producer's retries were a count, 16, about 13 s of
/// back-off. With the default 120 s delivery timeout every batch is stored;
/// a producer bounded by the old count (`retries: 16`) still gives up,
/// and says its batches' fate is unknown, not that they failed, because
/// their connection broke under them.
#[test]
fn a_16_s_outage_is_ridden_out_within_the_delivery_timeout_and_a_retry_count_gives_up() {
    let port = free_ports(2);
    let options = BrokerOptions {
        listen: Some(format!("127.0.0.1:{port}")),
        ..BrokerOptions::default()
    };
    let mut broker = Broker::start(options.clone());
    let client = broker.client();
    create(&client, "outage", 1);
    let mut deadline = producer(&client, "outage", ProducerConfig::default());
    let mut counted = producer(
        &client,
        "outage",
        ProducerConfig {
            retries: 16,
            ..ProducerConfig::default()
        },
    );
    send(&mut deadline, 0..1_000);
    send(&mut counted, 0..1_000);
    deadline.flush().unwrap();
    counted.flush().unwrap();

    broker.kill9();
    let down = Instant::now();
    send(&mut deadline, 1_000..2_000);
    send(&mut counted, 1_000..2_000);
    std::thread::sleep(Duration::from_secs(16));
    broker.set_options(options);
    broker.restart();
    let outage = down.elapsed();

    deadline.flush().unwrap();
    let (stored, failed, unknown) = tally(&deadline.take_deliveries());
    let counted_flush = counted.flush();
    let (c_stored, c_failed, c_unknown) = tally(&counted.take_deliveries());
    eprintln!(
        "outage of {outage:.1?}: delivery timeout 120 s: {stored} stored, {failed} failed, \
         {unknown} unknown; retries 16: {c_stored} stored, {c_failed} failed, {c_unknown} unknown"
    );
    assert_eq!((stored, failed, unknown), (2_000, 0, 0));
    // The count ran out during the outage: reconnects failed at once
    // (connection refused), each an attempt.
    assert!(c_stored < 2_000, "retries 16 rode out {outage:?}");
    let error = counted_flush.unwrap_err();
    assert!(
        matches!(error, ClientError::Undelivered { .. }),
        "{error:?}"
    );
    assert_eq!(c_failed + c_unknown, 2_000 - c_stored);
}

/// Against a stopped broker (SIGSTOP) with a 4 s delivery timeout: batches
/// written before the request timeout noticed are `Unknown`, batches queued
/// behind them and never written are `Failed`, both with
/// [`ClientError::DeliveryTimeout`] naming the last attempt's error. Once
/// the broker runs again it may still store the unknown ones (their
/// requests were in its socket); it never stores a failed one.
#[test]
fn a_stopped_broker_past_the_delivery_timeout_leaves_unknown_and_failed_batches_told_apart() {
    let broker = Broker::start(BrokerOptions::default());
    let client = Client::with_config(
        &broker.address(),
        ClientConfig {
            request_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_millis(500),
            ..ClientConfig::default()
        },
    )
    .unwrap();
    create(&client, "doubt", 1);
    let mut producer = producer(
        &client,
        "doubt",
        ProducerConfig {
            delivery_timeout: Duration::from_secs(4),
            ..ProducerConfig::default()
        },
    );
    send(&mut producer, 0..500);
    producer.flush().unwrap();
    let (stored, _, _) = tally(&producer.take_deliveries());
    assert_eq!(stored, 500);

    let pid = broker.pid().unwrap() as i32;
    // SAFETY: signalling the broker process this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(200));
    // Written into the stopped broker's socket: never answered.
    send(&mut producer, 500..1_000);
    // Past the 1 s request timeout the connection is given up on; what
    // comes next waits behind those batches and is never written (every
    // reconnect times out at the handshake).
    std::thread::sleep(Duration::from_millis(2_500));
    send(&mut producer, 1_000..1_500);
    let started = Instant::now();
    let error = producer.flush().unwrap_err();
    let waited = started.elapsed();
    let deliveries = producer.take_deliveries();
    let (_, failed, unknown) = tally(&deliveries);
    eprintln!("after {waited:.1?} more: {failed} failed, {unknown} unknown; flush: {error}");
    match &error {
        ClientError::Undelivered {
            messages,
            unknown: in_doubt,
            ..
        } => {
            assert_eq!(*messages, 1_000, "{error}");
            assert_eq!(*in_doubt, 500, "{error}");
        }
        other => panic!("expected Undelivered, got {other:?}"),
    }
    assert!(
        error.to_string().contains("may have been stored"),
        "{error}"
    );
    let mut failed_ids = BTreeSet::new();
    let mut unknown_ids = BTreeSet::new();
    for d in &deliveries {
        let timed_out = d
            .error()
            .is_some_and(|e| matches!(e, ClientError::DeliveryTimeout { .. }));
        assert!(timed_out, "{d:?}");
        match d.outcome {
            Outcome::Failed(_) => failed_ids.extend(ids(d, 0)),
            Outcome::Unknown(_) => unknown_ids.extend(ids(d, 0)),
            Outcome::Stored(_) => panic!("stored while stopped: {d:?}"),
        }
    }
    assert_eq!(unknown_ids, (500..1_000).collect());
    assert_eq!(failed_ids, (1_000..1_500).collect());

    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // The producer goes on: its next batches are stored (and flushed, so
    // what the woken broker took from the old connection is flushed too).
    send(&mut producer, 1_500..2_000);
    producer.flush().unwrap();
    let log: Vec<u64> = read_all(&client, "doubt", 0, 0)
        .iter()
        .map(|m| check_numbered_payload(&m.value, SIZE))
        .collect();
    let present: BTreeSet<u64> = log.iter().copied().collect();
    let unknown_stored = unknown_ids.intersection(&present).count();
    eprintln!(
        "in the log: {} messages; of the 500 unknown {unknown_stored} were stored after all; \
         of the 500 failed 0 may be",
        log.len()
    );
    assert!(
        failed_ids.is_disjoint(&present),
        "a batch reported failed is stored"
    );
    assert!((0..500).chain(1_500..2_000).all(|i| present.contains(&i)));
}
