//! Issue 27, item 5: a three-member etcd with one member dead. About half
//! of the group and admin requests failed against the dead member's
//! address (the etcd client balanced over every endpoint, the dead one
//! included), and a broker restarted during the fault failed to start in
//! one run of two. The brokers now probe their endpoints and send only to
//! live ones, and start with any live one.

use harness::etcd::EtcdCluster;
use harness::{eventually, Broker, BrokerOptions};
use protocol::client::TopicSettings;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn broker(etcd: &EtcdCluster, id: u32) -> Broker {
    Broker::start(BrokerOptions {
        etcd: Some(etcd.endpoints()),
        cluster: "members".into(),
        broker_id: id,
        config_toml: "etcd_lease_ttl_s = 3\netcd_timeout_ms = 2000\n".into(),
        ..BrokerOptions::default()
    })
}

#[test]
fn r27_5_with_one_etcd_member_dead_every_request_is_served_and_a_broker_starts() {
    let mut etcd = EtcdCluster::start(3);
    let mut brokers: Vec<Broker> = (1..=2).map(|id| broker(&etcd, id)).collect();
    let client = brokers[0].client();
    client
        .create_topic("before", 2, &TopicSettings::default())
        .unwrap();

    // The first endpoint of every list: the one a client tries first.
    etcd.kill(0);
    let killed = Instant::now();
    // The brokers notice within a probe or two; then nothing fails.
    std::thread::sleep(Duration::from_secs(3));
    let mut failures = Vec::new();
    let rounds = 40;
    for i in 0..rounds {
        let topic = format!("during-{i}");
        if let Err(e) = client.create_topic(&topic, 1, &TopicSettings::default()) {
            failures.push(format!("create {topic}: {e}"));
        }
        let joined = client.join_group("g", "m", &["before"], 10_000);
        match joined {
            Ok(joined) => {
                if let Err(e) = client.heartbeat("g", &joined, 0, 0) {
                    failures.push(format!("heartbeat: {e}"));
                }
                if let Err(e) = client.leave_group("g", &joined) {
                    failures.push(format!("leave: {e}"));
                }
            }
            Err(e) => failures.push(format!("join: {e}")),
        }
        if let Err(e) = client.describe_group("g") {
            failures.push(format!("describe: {e}"));
        }
    }
    // A broker restarted during the fault starts and registers.
    brokers[1].stop();
    brokers[1].restart();
    eventually("both brokers live", WAIT, || {
        let m = client.metadata(&[]).map_err(|e| e.to_string())?;
        (m.brokers.len() == 2)
            .then_some(())
            .ok_or(format!("{:?}", m.brokers))
    });
    eprintln!(
        "one of 3 etcd members dead for {:.1?}: {} of {} group and admin requests failed{}",
        killed.elapsed(),
        failures.len(),
        rounds * 5,
        failures
            .first()
            .map(|f| format!(" (the first: {f})"))
            .unwrap_or_default()
    );
    assert!(failures.is_empty(), "{failures:#?}");

    // The member comes back: still served.
    etcd.restart(0);
    client
        .create_topic("after", 1, &TopicSettings::default())
        .unwrap();
}
