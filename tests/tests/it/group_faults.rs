//! Issue 27, items 2 and 6: a group member under faults. Its heartbeats go
//! out on their own thread, so a `poll` held up by a stopped broker does
//! not end its session; and while etcd is paused it keeps consuming what it
//! owns at full speed instead of waiting on heartbeats and commits.

use super::util::producer;
use harness::etcd::Etcd;
use harness::{eventually, Broker, BrokerOptions};
use protocol::client::{
    AckMode, Client, ClientConfig, GroupConfig, GroupConsumer, GroupMessage, TopicSettings,
};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn brokers(etcd: &Etcd, name: &str, count: u32) -> Vec<Broker> {
    (1..=count)
        .map(|id| Broker::start(BrokerOptions::clustered(etcd, name, id)))
        .collect()
}

/// Produces `count` messages to `partition`, acknowledged once flushed.
fn produce(client: &Client, topic: &str, partition: u32, count: u64) {
    let mut producer = producer(client, topic, AckMode::Flushed, 100);
    for n in 0..count {
        producer
            .send_to(partition, None, n.to_string().as_bytes())
            .unwrap();
    }
    producer.flush().unwrap();
}

/// Polls until `count` messages were read (or panics after `WAIT`).
fn read(member: &mut GroupConsumer, count: usize) -> Vec<GroupMessage> {
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while out.len() < count {
        assert!(Instant::now() < deadline, "{} of {count} read", out.len());
        out.extend(member.poll().unwrap());
    }
    out
}

/// The partitions of `group` and their owners.
fn owners(client: &Client, group: &str) -> Vec<(u32, String)> {
    client
        .describe_group(group)
        .unwrap()
        .partitions
        .iter()
        .map(|p| (p.partition, p.owner.clone()))
        .collect()
}

/// A member (3 s session) owns a partition on each of two brokers; one
/// broker is SIGSTOPped for 10 s. The member's poll waits on that broker's
/// fetch (20 s request timeout) — before, its heartbeats waited with it and
/// the session lapsed within 3 s; now it lives, the member keeps both
/// partitions throughout, and reads on once the broker runs again.
#[test]
fn r27_2_a_poll_held_up_by_a_stopped_broker_does_not_end_the_members_session() {
    let etcd = Etcd::start();
    let mut brokers = brokers(&etcd, "held", 2);
    let client = brokers[0].client();
    client
        .create_topic("held", 2, &TopicSettings::default())
        .unwrap();
    let metadata = client.metadata(&["held"]).unwrap();
    let on = |broker: u32| {
        metadata.topics[0]
            .partitions
            .iter()
            .find(|p| p.broker_id == broker)
            .map(|p| p.partition)
            .unwrap()
    };
    let (live, stopped) = (on(1), on(2));
    produce(&client, "held", live, 500);
    produce(&client, "held", stopped, 500);
    let member_client = Client::with_config(
        &brokers[0].address(),
        ClientConfig {
            request_timeout: Duration::from_secs(20),
            ..ClientConfig::default()
        },
    )
    .unwrap();
    let config = GroupConfig {
        session_timeout: Duration::from_secs(3),
        ..GroupConfig::default()
    };
    let mut member =
        GroupConsumer::subscribe_with(&member_client, "held", &["held"], config).unwrap();
    read(&mut member, 1_000);
    let me = member.member_id().to_string();
    let rebalances = member.rebalances();

    brokers[1].pause(true);
    let stopped_at = Instant::now();
    let polling = std::thread::spawn(move || {
        // Polls go on (the first one waits on the stopped broker).
        let mut polls = 0u32;
        let mut longest = Duration::ZERO;
        while stopped_at.elapsed() < Duration::from_secs(12) {
            let started = Instant::now();
            member.poll().unwrap();
            longest = longest.max(started.elapsed());
            polls += 1;
        }
        (member, polls, longest)
    });
    // Past two sessions of the stop, the member is still the group's and
    // owns both partitions.
    std::thread::sleep(Duration::from_secs(7));
    let during = owners(&client, "held");
    assert_eq!(during.len(), 2, "{during:?}");
    assert!(during.iter().all(|(_, owner)| *owner == me), "{during:?}");
    std::thread::sleep(Duration::from_secs(3));
    brokers[1].pause(false);
    let (mut member, polls, longest) = polling.join().unwrap();
    assert_eq!(member.rebalances(), rebalances, "the session never lapsed");

    // Its lease (2 s) lapsed while it was stopped: it registers again.
    eventually("broker 2 live again", WAIT, || {
        let brokers = client.metadata(&[]).map_err(|e| e.to_string())?.brokers;
        (brokers.len() == 2)
            .then_some(())
            .ok_or(format!("{} live", brokers.len()))
    });
    produce(&client, "held", live, 100);
    produce(&client, "held", stopped, 100);
    let after = read(&mut member, 200);
    assert!(after.iter().any(|m| m.partition == stopped));
    assert!(after.iter().any(|m| m.partition == live));
    eprintln!(
        "broker 2 stopped 10 s under a member with a 3 s session: {polls} polls, the longest \
         {longest:.1?}; owners after 7 s {during:?}; rebalances {rebalances} -> {}",
        member.rebalances()
    );
    member.close().unwrap();
}

/// While etcd is paused, fetches work and members own their partitions,
/// but `ringlog consume --group` printed ~30 msg/s: it committed after
/// every batch, and each commit waited out the broker's etcd timeout. Now
/// it commits on an interval, and no member commits while its heartbeats
/// say the coordinator is away: the CLI and a library member (auto-commit
/// every second) both read at the rate messages come.
#[test]
fn r27_6_while_etcd_is_paused_a_member_consumes_what_it_owns_at_full_speed() {
    const RATE: u64 = 2_000;
    let mut etcd = Etcd::start();
    let brokers = brokers(&etcd, "paused", 1);
    let client = brokers[0].client();
    client
        .create_topic("steady", 1, &TopicSettings::default())
        .unwrap();
    let config = GroupConfig {
        auto_commit_interval: Some(Duration::from_secs(1)),
        ..GroupConfig::default()
    };
    let mut member =
        GroupConsumer::subscribe(&brokers[0].address(), "paused", &["steady"], config).unwrap();
    let cli = super::groups::CliMember::start(&brokers[0], "steady", "paused-cli", &[]);
    eventually("the member owns the partition", WAIT, || {
        member.poll().map_err(|e| e.to_string())?;
        (!member.assignment().is_empty())
            .then_some(())
            .ok_or("not yet".to_string())
    });
    let address = brokers[0].address();
    let producing = std::thread::spawn(move || {
        // RATE messages a second for 12 s, acknowledged once written.
        let client = Client::connect(&address).unwrap();
        let mut producer = producer(&client, "steady", AckMode::Written, 100);
        let started = Instant::now();
        for n in 0..12 * RATE {
            producer.send_to(0, None, n.to_string().as_bytes()).unwrap();
            if n % 100 == 99 {
                producer.flush().unwrap();
                let due = Duration::from_secs_f64((n + 1) as f64 / RATE as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        producer.flush().unwrap();
    });
    // 2 s of normal consumption, then etcd paused for 8 s.
    let mut read_before = 0usize;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        read_before += member.poll().unwrap().len();
    }
    etcd.pause(true);
    let paused = Instant::now();
    let cli_before = cli.printed();
    let mut read_paused = 0usize;
    let mut longest = Duration::ZERO;
    while paused.elapsed() < Duration::from_secs(8) {
        let started = Instant::now();
        read_paused += member.poll().unwrap().len();
        longest = longest.max(started.elapsed());
    }
    let paused_for = paused.elapsed();
    let cli_paused = cli.printed() - cli_before;
    etcd.pause(false);
    producing.join().unwrap();
    let rate_paused = read_paused as f64 / paused_for.as_secs_f64();
    let cli_rate = cli_paused as f64 / paused_for.as_secs_f64();
    let coordinator_away = member
        .outages()
        .iter()
        .any(|o| o.topic.is_empty() && o.partition.is_none());
    eprintln!(
        "etcd paused {paused_for:.1?}, produced at {RATE} msg/s: the library member read \
         {read_paused} meanwhile ({rate_paused:.0} msg/s; {read_before} in the 2 s before; the \
         longest poll {longest:.2?}; coordinator reported away: {coordinator_away}); ringlog \
         consume --group printed \
         {cli_paused} ({cli_rate:.0} msg/s)"
    );
    assert!(
        rate_paused > RATE as f64 * 0.8,
        "{rate_paused:.0} msg/s while etcd was paused"
    );
    assert!(
        cli_rate > RATE as f64 * 0.8,
        "the CLI printed {cli_rate:.0} msg/s while etcd was paused"
    );
    // Once etcd is back, the member's commits land again.
    eventually("a commit after etcd is back", WAIT, || {
        member.poll().map_err(|e| e.to_string())?;
        let committed = client
            .describe_group("paused")
            .map_err(|e| e.to_string())?
            .partitions
            .first()
            .and_then(|p| p.offset)
            .unwrap_or(0);
        (committed > 0)
            .then_some(())
            .ok_or(format!("committed {committed}"))
    });
    member.close().unwrap();
}
