//! Issue 46, item 6, with real processes: what a broker moved aside into
//! its data directory's `.orphaned/` (here: a topic deleted while the
//! broker was down) is reported — `ringlog brokers describe N` with topic,
//! partition, bytes, why and when, and the `ringlog_orphaned_*` metrics —
//! and deleted only on request, only what is older than the age asked.

use super::replica_operations::ringlog;
use super::replication::{cluster_of, options, replicated};
use super::util::{producer, scrape};
use harness::eventually;
use protocol::client::AckMode;
use std::time::Duration;

/// The value of an unlabelled metric.
fn gauge(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
}

#[test]
fn r46_orphaned_data_is_reported_with_why_and_deleted_on_request_only() {
    let etcd = harness::etcd::Etcd::start();
    let mut brokers = cluster_of(
        (1..=2)
            .map(|id| {
                let mut o = options(&etcd, "orphans", id);
                o.metrics = true;
                o
            })
            .collect(),
    );
    let client = brokers[0].client();
    client.create_topic("clicks", 2, &replicated(2, 1)).unwrap();
    let mut p = producer(&client, "clicks", AckMode::All, 100);
    for n in 0..1_000u32 {
        p.send_to(n % 2, None, format!("click {n:06}").as_bytes())
            .unwrap();
    }
    p.flush().unwrap();
    // Broker 2 away while the topic is deleted: at its start no registered
    // topic gives it its copies, and it moves them aside.
    brokers[1].stop();
    client.delete_topic("clicks").unwrap();
    brokers[1].restart();
    let at = brokers[0].address();
    let described = eventually("broker 2 back", Duration::from_secs(30), || {
        let (code, out, err) = ringlog(&at, &["brokers", "describe", "2"]);
        if code == 0 {
            Ok(out)
        } else {
            Err(err)
        }
    });
    assert!(
        described.contains("orphaned: 2 partition directories"),
        "{described}"
    );
    for partition in 0..2 {
        let line = described
            .lines()
            .find(|l| l.starts_with(&format!("clicks\t{partition}\t")))
            .unwrap_or_else(|| panic!("clicks-{partition} listed: {described}"));
        let fields: Vec<&str> = line.split('\t').collect();
        assert!(fields[2].parse::<u64>().unwrap() > 5_000, "{line}");
        assert!(
            fields[3].starts_with("20") && fields[3].ends_with('Z'),
            "{line}"
        );
        assert!(fields[4].starts_with(".orphaned/"), "{line}");
        assert!(fields[5].contains("deleted"), "{line}");
    }
    let metrics = brokers[1].metrics.clone().unwrap();
    let scraped = scrape(&metrics);
    assert_eq!(gauge(&scraped, "ringlog_orphaned_partitions"), Some(2));
    let bytes = gauge(&scraped, "ringlog_orphaned_bytes").unwrap();
    assert!(bytes > 10_000, "{bytes}");
    let (_, none, _) = ringlog(&at, &["brokers", "describe", "1"]);
    assert!(none.contains("orphaned: 0 partition directories"), "{none}");

    // Too young for a week's age: nothing deleted.
    let (code, kept, err) = ringlog(
        &at,
        &["brokers", "purge-orphaned", "2", "--older-than", "7d"],
    );
    assert_eq!(code, 0, "{kept}{err}");
    assert!(kept.contains("purged 0 partition directories"), "{kept}");
    assert!(kept.contains("left: 2 partition directories"), "{kept}");
    let aside = brokers[1].data_dir().join(".orphaned");
    assert_eq!(std::fs::read_dir(&aside).unwrap().count(), 2);

    // Bad input changes nothing.
    let (code, _, bad_age) = ringlog(
        &at,
        &["brokers", "purge-orphaned", "2", "--older-than", "7w"],
    );
    assert_eq!(code, 1);
    assert!(bad_age.contains("the unit is s, m, h or d"), "{bad_age}");
    let (code, _, no_broker) = ringlog(&at, &["brokers", "describe", "9"]);
    assert_eq!(code, 1);
    assert!(
        no_broker.contains("broker 9 is not live (live: 1, 2)"),
        "{no_broker}"
    );
    assert_eq!(std::fs::read_dir(&aside).unwrap().count(), 2);

    // Any age: deleted, and the metrics say so.
    let (code, purged, err) = ringlog(
        &at,
        &["brokers", "purge-orphaned", "2", "--older-than", "0s"],
    );
    assert_eq!(code, 0, "{purged}{err}");
    assert!(
        purged.contains(&format!("purged 2 partition directories, {bytes} bytes")),
        "{purged}"
    );
    assert_eq!(std::fs::read_dir(&aside).unwrap().count(), 0);
    let scraped = scrape(&metrics);
    assert_eq!(gauge(&scraped, "ringlog_orphaned_partitions"), Some(0));
    assert_eq!(gauge(&scraped, "ringlog_orphaned_bytes"), Some(0));
    eprintln!(
        "broker 2 restarted after clicks was deleted:\n{described}\nmetrics: ringlog_orphaned_bytes {bytes}\npurge --older-than 7d:\n{kept}bad input:\n{}\n{}purge --older-than 0s:\n{purged}",
        bad_age.trim_end(),
        no_broker
    );
}
