//! The shard's disk driver (`broker/src/storage/driver.rs`): many
//! partitions' flushes share one `syncfs`, and a `syncfs` that reports an
//! error falls back to an fdatasync per file without losing or refusing an
//! acknowledged message.

use super::util::{create, metric, producer, scrape};
use harness::{Broker, BrokerOptions};
use protocol::client::{AckMode, Consumer};

const PARTITIONS: u32 = 16;
const PER_PARTITION: u64 = 300;

/// Produces `PER_PARTITION` numbered messages to each partition with
/// acks = flushed (a batch each to every partition in turn, so many
/// partitions wait for a flush at once), then reads every one back.
fn produce_flushed_and_read_back(broker: &Broker) {
    let client = broker.client();
    create(&client, "many", PARTITIONS);
    let mut writer = producer(&client, "many", AckMode::Flushed, 10);
    for i in 0..PER_PARTITION {
        for p in 0..PARTITIONS {
            let n = i * u64::from(PARTITIONS) + u64::from(p);
            writer
                .send_to(p, None, &harness::numbered_payload(n, 100))
                .unwrap();
        }
    }
    writer
        .flush()
        .expect("every message acknowledged as flushed");
    assert_eq!(
        writer.acked_messages(),
        PER_PARTITION * u64::from(PARTITIONS)
    );
    for p in 0..PARTITIONS {
        let mut consumer = Consumer::new(&client, "many", p, 0).unwrap();
        let mut seen = 0;
        while seen < PER_PARTITION {
            for message in consumer.poll().unwrap() {
                let n = harness::check_numbered_payload(&message.value, 100);
                assert_eq!(n, seen * u64::from(PARTITIONS) + u64::from(p));
                seen += 1;
            }
        }
    }
}

/// Waits until the broker's flush counters (files synced, batches, batches
/// by syncfs) satisfy `done`.
fn wait_for_flush_counts(broker: &Broker, done: impl Fn(u64, u64, u64) -> bool) {
    let endpoint = broker.metrics.clone().unwrap();
    harness::eventually(
        "flush batches counted",
        std::time::Duration::from_secs(10),
        || {
            let text = scrape(&endpoint);
            let syncs = metric(&text, "ringlog_disk_syncs_total");
            let batches = metric(&text, "ringlog_disk_sync_batches_total");
            let syncfs = metric(&text, "ringlog_disk_syncfs_total");
            done(syncs, batches, syncfs).then_some(()).ok_or(format!(
                "{syncs} files synced in {batches} batches, {syncfs} by syncfs"
            ))
        },
    );
}

#[test]
fn many_partitions_flushed_at_once_share_a_syncfs() {
    let broker = Broker::start(BrokerOptions {
        metrics: true,
        ..BrokerOptions::default()
    });
    produce_flushed_and_read_back(&broker);
    // 16 partitions' flushes went out in fewer batches than files, and
    // some of those batches were one syncfs each.
    wait_for_flush_counts(&broker, |syncs, batches, syncfs| {
        syncs >= u64::from(PARTITIONS) && batches < syncs && syncfs > 0
    });
}

#[test]
fn a_failing_syncfs_falls_back_to_fdatasync_and_loses_nothing() {
    let broker = Broker::start(BrokerOptions {
        metrics: true,
        faults: Some("syncfs_errno=5".into()),
        ..BrokerOptions::default()
    });
    produce_flushed_and_read_back(&broker);
    wait_for_flush_counts(&broker, |syncs, _, syncfs| {
        syncs >= u64::from(PARTITIONS) && syncfs == 0
    });
    // Said once per shard that met it, not once per flush.
    let log = broker.log();
    let said = log.matches("syncfs reported a write-back error").count();
    assert!((1..=2).contains(&said), "{said} times in:\n{log}");
}
