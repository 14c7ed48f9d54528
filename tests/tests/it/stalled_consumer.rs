//! A consumer that stops reading must not stall other connections on the
//! same shard (the sendfile path never blocks the shard), and the zero-copy
//! path shows in the metrics.

use super::util::{create, metric, producer, read_all, scrape};
use harness::{numbered_payload, Broker, BrokerOptions};
use protocol::client::{AckMode, Connection};
use protocol::codec::{self, FetchArgs};
use protocol::frame::Api;
use std::time::Duration;

#[test]
fn a_stalled_consumer_does_not_stall_another_on_the_same_shard() {
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        metrics: true,
        ..BrokerOptions::default()
    });
    let client = broker.client();
    create(&client, "big", 1);
    let mut p = producer(&client, "big", AckMode::Flushed, 100);
    for i in 0..20_000u64 {
        p.send_to(0, None, &numbered_payload(i, 1000)).unwrap();
    }
    p.flush().unwrap();

    // The stalled consumer: asks for ~20 MB in pipelined fetches and never reads.
    let mut stalled = Connection::connect(&broker.address()).unwrap();
    for k in 0..20u64 {
        let header = codec::fetch_request(
            &mut stalled.fbb,
            "big",
            0,
            FetchArgs {
                offset: k * 1009 * 1000,
                max_bytes: 1 << 20,
                max_wait_ms: 0,
            },
        )
        .to_vec();
        stalled.send(Api::Fetch, &header, &[]).unwrap();
    }
    stalled.flush().unwrap();
    // The stalled socket is full: the broker is waiting for it to drain
    // (issue 8, item 22: a condition, not a sleep).
    let metrics_address = broker.metrics.clone().unwrap();
    harness::eventually(
        "the stalled socket fills up",
        Duration::from_secs(60),
        || {
            let copied = metric(
                &scrape(&metrics_address),
                "ringlog_fetch_copied_bytes_total",
            );
            (copied > 0)
                .then_some(())
                .ok_or(format!("{copied} bytes copied"))
        },
    );

    // Another client on the same shard keeps being served: produce, fetch,
    // metadata. A stalled shard fails the test instead of hanging it.
    let address = broker.address();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for round in 0..20u64 {
            let other = protocol::client::Client::connect(&address).unwrap();
            let mut p = producer(&other, "big", AckMode::Flushed, 1);
            p.send_to(0, None, &numbered_payload(100_000 + round, 10))
                .unwrap();
            p.flush().unwrap();
            let got = read_all(&other, "big", 0, 20_000 * 1009);
            assert_eq!(got.len() as u64, round + 1);
        }
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("the other client was not served within 60 s: the shard stalled");
    // Metrics are published once a second: wait for the last flushes.
    let metrics = harness::eventually("the flushes published", Duration::from_secs(30), || {
        let text = scrape(&metrics_address);
        let flushes = metric(&text, "ringlog_flushes_total");
        let timed = metric(&text, "ringlog_flush_latency_seconds_count");
        (flushes >= 1 && timed == flushes)
            .then_some(text.clone())
            .ok_or(format!("{flushes} flushes, {timed} timed"))
    });
    let zero_copy = metric(&metrics, "ringlog_fetch_zero_copy_bytes_total");
    assert!(zero_copy > 0, "sendfile bytes are counted:\n{metrics}");
    // The stalled socket filled up: the writability wait really ran.
    let copied = metric(&metrics, "ringlog_fetch_copied_bytes_total");
    assert!(copied > 0, "the full-socket path was exercised:\n{metrics}");
    // The 20 flush-acknowledged produces were flushed, counted and timed.
    let flushes = metric(&metrics, "ringlog_flushes_total");
    assert!(flushes >= 1, "flushes are counted:\n{metrics}");
    let timed = metric(&metrics, "ringlog_flush_latency_seconds_count");
    assert_eq!(timed, flushes, "every flush is timed:\n{metrics}");
    drop(stalled);
}
