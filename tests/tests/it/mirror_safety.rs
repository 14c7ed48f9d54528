//! Issue 45 with real processes: a copy knows its source (no second
//! source, no recreated topic, no ordinary topic is ever written into),
//! the paper's topology (several datacenters' topics of the same names
//! into one analysis cluster, under prefixes), bad input failing fast, and
//! a source leader killed under the mirror.

use super::replica_operations::ringlog;
use super::replication::{cluster, files, metadata, replicated};
use super::util::{producer, read_all};
use harness::{eventually, Broker, BrokerOptions};
use protocol::client::{AckMode, Client, OffsetSpec, Producer, ProducerConfig, TopicSettings};
use std::time::{Duration, Instant};

pub(super) fn standalone() -> Broker {
    Broker::start(BrokerOptions {
        config_toml: "segment_bytes_min = 1024\n".into(),
        ..BrokerOptions::default()
    })
}

fn small_segments() -> TopicSettings {
    TopicSettings {
        segment_bytes: 64 * 1024,
        ..TopicSettings::default()
    }
}

/// `ringlog --brokers TARGET mirror ARGS`, running, its stderr to
/// `stderr`.
pub(super) fn spawn_mirror(
    target: &str,
    args: &[&str],
    stderr: impl Into<std::process::Stdio>,
) -> std::process::Child {
    std::process::Command::new(harness::binary("ringlog"))
        .args(["--brokers", target, "mirror"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// `count` messages "`label` n" into partition 0 of `topic`.
fn fill(client: &Client, topic: &str, label: &str, count: u64) {
    let mut p = producer(client, topic, AckMode::Flushed, 100);
    for n in 0..count {
        p.send_to(0, None, format!("{label} {n:06}").as_bytes())
            .unwrap();
    }
    p.flush().unwrap();
}

fn end(client: &Client, topic: &str) -> u64 {
    client
        .list_offsets(topic, 0, OffsetSpec::Latest, 0)
        .unwrap()
        .1
        .end_offset
}

/// Segment files compared, saying where they first differ (the files
/// themselves are too long for a failure message).
pub(super) fn differ(
    a: &std::collections::BTreeMap<String, Vec<u8>>,
    b: &std::collections::BTreeMap<String, Vec<u8>>,
) -> Option<String> {
    let names = |m: &std::collections::BTreeMap<String, Vec<u8>>| -> Vec<(String, usize)> {
        m.iter().map(|(k, v)| (k.clone(), v.len())).collect()
    };
    if names(a) != names(b) {
        return Some(format!("{:?} against {:?}", names(a), names(b)));
    }
    a.iter().zip(b).find_map(|((name, x), (_, y))| {
        let at = x.iter().zip(y).position(|(p, q)| p != q)?;
        Some(format!("{name} differs at byte {at}"))
    })
}

/// `ringlog --brokers TARGET mirror --from SOURCE ARGS --exit-at-end`:
/// its exit code, what it said, and how long it took.
fn mirror_once(target: &str, source: &str, args: &[&str]) -> (i32, String, Duration) {
    let started = Instant::now();
    let mut all = vec!["mirror", "--from", source, "--exit-at-end"];
    all.extend_from_slice(args);
    let (code, out, err) = ringlog(target, &all);
    (code, format!("{out}{err}"), started.elapsed())
}

/// Issue 45, items 1, 2 and 5: two datacenters with a topic `clicks` each,
/// mirrored into one analysis cluster. The second source is refused from
/// the first's copy (not one byte appended), whatever name it runs under;
/// with `--prefix` each lands in its own copy, byte-identical to its own
/// source. An ordinary topic of the name, the same cluster on both sides
/// and a `--topics` that matches nothing fail fast with one line.
#[test]
fn r45_a_copy_takes_only_its_own_source_and_prefixes_gather_datacenters() {
    let (dc1, dc2, analysis) = (standalone(), standalone(), standalone());
    for (dc, label) in [(&dc1, "dc1"), (&dc2, "dc2")] {
        let client = dc.client();
        client.create_topic("clicks", 1, &small_segments()).unwrap();
        fill(&client, "clicks", label, 3_000);
    }
    let at = analysis.address();
    let (code, said, took) = mirror_once(
        &at,
        &dc1.address(),
        &["--topics", "clicks", "--name", "dc1"],
    );
    assert_eq!(code, 0, "{said}");
    eprintln!("dc1 -> analysis ({took:?}): {said}");
    let dst = analysis.client();
    let recorded = dst.metadata(&["clicks"]).unwrap().topics[0]
        .mirror_source
        .clone();
    assert!(
        recorded.starts_with("dc1/clicks (cluster ") && recorded.contains(", topic id "),
        "{recorded}"
    );
    let copy = files(&analysis, "clicks", 0);
    if let Some(d) = differ(&copy, &files(&dc1, "clicks", 0)) {
        panic!("the copy is dc1's log: {d}");
    }

    // dc2 into the same copy: refused, under its own name and under dc1's.
    let mut refusals = Vec::new();
    for name in ["dc2", "dc1"] {
        let (code, said, took) =
            mirror_once(&at, &dc2.address(), &["--topics", "clicks", "--name", name]);
        assert_ne!(code, 0, "{said}");
        assert!(said.contains("another cluster's topic"), "{said}");
        assert!(took < Duration::from_secs(5), "{took:?}: {said}");
        refusals.push(said);
    }
    if let Some(d) = differ(&files(&analysis, "clicks", 0), &copy) {
        panic!("not one byte appended: {d}");
    }

    // The paper's topology: each datacenter under its own prefix.
    let (code, said, _) = mirror_once(
        &at,
        &dc2.address(),
        &["--topics", "clicks", "--name", "dc2", "--prefix", "dc2."],
    );
    assert_eq!(code, 0, "{said}");
    if let Some(d) = differ(
        &files(&analysis, "dc2.clicks", 0),
        &files(&dc2, "clicks", 0),
    ) {
        panic!("the segment files differ: {d}");
    }
    if let Some(d) = differ(&files(&analysis, "clicks", 0), &copy) {
        panic!("the segment files differ: {d}");
    }
    // More in both datacenters; one mirror each, again, catches up.
    fill(&dc1.client(), "clicks", "dc1 more", 1_000);
    fill(&dc2.client(), "clicks", "dc2 more", 1_500);
    for (dc, prefix, name) in [(&dc1, "", "dc1"), (&dc2, "dc2.", "dc2")] {
        let (code, said, _) = mirror_once(
            &at,
            &dc.address(),
            &["--topics", "clicks", "--name", name, "--prefix", prefix],
        );
        assert_eq!(code, 0, "{said}");
        if let Some(d) = differ(
            &files(&analysis, &format!("{prefix}clicks"), 0),
            &files(dc, "clicks", 0),
        ) {
            panic!("{name}'s copy is its own source's log: {d}");
        }
    }
    let (v, vout, verr) = ringlog(
        &dc2.address(),
        &["verify", "clicks", "--against", &at, "--as", "dc2.clicks"],
    );
    assert_eq!(v, 0, "{vout}{verr}");
    assert!(vout.contains("match over"), "{vout}");
    eprintln!(
        "ringlog verify clicks --against ANALYSIS --as dc2.clicks: {}",
        vout.trim()
    );

    // An ordinary topic of the same name in the target.
    dc1.client()
        .create_topic("plain", 1, &small_segments())
        .unwrap();
    fill(&dc1.client(), "plain", "dc1 plain", 100);
    dst.create_topic("plain", 1, &small_segments()).unwrap();
    fill(&dst, "plain", "analysis's own", 10);
    let before = end(&dst, "plain");
    let (code, ordinary, took) =
        mirror_once(&at, &dc1.address(), &["--topics", "plain", "--name", "dc1"]);
    assert_ne!(code, 0, "{ordinary}");
    assert!(ordinary.contains("is not a mirror's copy"), "{ordinary}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(end(&dst, "plain"), before);

    // The same cluster on both sides; a --topics that matches nothing.
    let (code, same, took) = mirror_once(&dc1.address(), &dc1.address(), &["--topics", "clicks"]);
    assert_ne!(code, 0, "{same}");
    assert!(same.contains("are the same cluster"), "{same}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (code, nothing, took) = mirror_once(&at, &dc1.address(), &["--topics", "nope.*"]);
    assert_ne!(code, 0, "{nothing}");
    assert!(
        nothing.contains("matches none of the source's"),
        "{nothing}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    eprintln!(
        "dc2 into dc1's copy, refused:\n  {}\nordinary topic: {}\nsame cluster: {}\nnothing matches: {}",
        refusals.join("\n  "),
        ordinary.trim(),
        same.trim(),
        nothing.trim()
    );
}

/// Issue 45, item 1: the source topic deleted and created again under a
/// running mirror, and written past where the copy ends. The copy takes
/// none of the new topic's bytes; the mirror stops it with an error naming
/// why, and exits non-zero when nothing is left to copy.
#[test]
fn r45_a_source_topic_created_again_stops_its_copy_and_appends_nothing() {
    let (dc1, analysis) = (standalone(), standalone());
    let src = dc1.client();
    src.create_topic("clicks", 1, &small_segments()).unwrap();
    fill(&src, "clicks", "old", 2_000);
    let mut mirror = spawn_mirror(
        &analysis.address(),
        &[
            "--from",
            &dc1.address(),
            "--topics",
            "clicks",
            "--name",
            "dc1",
        ],
        std::process::Stdio::piped(),
    );
    let dst = analysis.client();
    let copied = end(&src, "clicks");
    eventually(
        "the copy caught up",
        Duration::from_secs(30),
        || match dst.list_offsets("clicks", 0, OffsetSpec::Latest, 0) {
            Ok((_, o)) if o.flushed_offset == copied => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let old = files(&analysis, "clicks", 0);
    src.delete_topic("clicks").unwrap();
    src.create_topic("clicks", 1, &small_segments()).unwrap();
    fill(&src, "clicks", "new topic", 6_000);
    assert!(end(&src, "clicks") > copied);
    let status = eventually("the mirror stopped", Duration::from_secs(30), || {
        mirror
            .try_wait()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "running".to_string())
    });
    let output = mirror.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(!status.success(), "{said}");
    assert!(said.contains("created again"), "{said}");
    if let Some(d) = differ(&files(&analysis, "clicks", 0), &old) {
        panic!("not one byte appended: {d}");
    }
    eprintln!(
        "source topic recreated: the mirror exited with {status}, saying:\n{}",
        said.lines()
            .filter(|l| l.contains("again"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Issue 45, item 3: the leader of a replicated source partition (R=3) is
/// SIGKILLed while an idempotent producer writes 60,000 numbered messages
/// and the mirror copies them. The mirror moves to the new leader by
/// itself; the copy ends with every message once, in order, and is the
/// source's log byte for byte. Prints how long the copy paused.
#[test]
fn r45_the_mirror_follows_a_source_leader_killed_mid_stream() {
    leader_lost_mid_stream(false);
}

/// The same with the leader paused (SIGSTOP) past its lease instead: the
/// mirror's read at it hangs on a live connection, which no error ends; it
/// must give up on it and follow the new leader, and the old one, woken
/// (SIGCONT) after the copy moved on, must not make it copy anything twice.
#[test]
fn r45_the_mirror_follows_a_source_leader_paused_past_its_lease() {
    leader_lost_mid_stream(true);
}

fn leader_lost_mid_stream(pause: bool) {
    const MESSAGES: u64 = 60_000;
    const SIZE: usize = 100;
    let etcd = harness::etcd::Etcd::start();
    let mut sources = cluster(&etcd, "dc1", 3);
    let analysis = standalone();
    let src = sources[0].client();
    src.create_topic("events", 1, &replicated(3, 2)).unwrap();
    let port = harness::free_ports(1);
    let metrics = format!("127.0.0.1:{port}");
    let addresses: Vec<String> = sources.iter().map(Broker::address).collect();
    let mut mirror = spawn_mirror(
        &analysis.address(),
        &[
            "--from",
            &addresses.join(", "),
            "--topics",
            "events",
            "--name",
            "dc1",
            "--metrics",
            &metrics,
        ],
        std::process::Stdio::piped(),
    );
    let writer = {
        let address = addresses.join(",");
        std::thread::spawn(move || {
            // A producer that gives up on a paused leader within 2 s, as
            // the mirror does: what the copy shows is the mirror's delay,
            // not the producer's.
            let client = Client::with_config(
                &address,
                protocol::client::ClientConfig {
                    request_timeout: Duration::from_secs(2),
                    ..protocol::client::ClientConfig::default()
                },
            )
            .unwrap();
            let mut p = Producer::new(
                &client,
                "events",
                ProducerConfig {
                    acks: AckMode::All,
                    batch_messages: 100,
                    ..ProducerConfig::default()
                },
            )
            .unwrap();
            for n in 0..MESSAGES {
                p.send_to(0, None, &harness::numbered_payload(n, SIZE))
                    .unwrap();
                if n % 1_000 == 999 {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            p.close(Duration::from_secs(120)).unwrap();
        })
    };
    let dst = analysis.client();
    // What consumers of the copy see (flushed), not only what it holds.
    let copy_end = || {
        dst.list_offsets("events", 0, OffsetSpec::Latest, 0)
            .map_or(0, |(_, o)| o.flushed_offset)
    };
    eventually("a third copied", Duration::from_secs(60), || {
        let at = copy_end();
        if at > MESSAGES * 40 {
            Ok(())
        } else {
            Err(at.to_string())
        }
    });
    let leader = metadata(&src, "events").topics[0].partitions[0].broker_id;
    let index = sources
        .iter()
        .position(|b| b.options().broker_id == leader)
        .unwrap();
    if pause {
        sources[index].pause(true);
    } else {
        sources[index].kill9();
    }
    let killed = Instant::now();
    let at_kill = copy_end();
    // A new leader's epoch begins at its log's end when it is elected:
    // bytes past that end were written in the new epoch, and only the new
    // leader can have served them. The copy holding one of them is the
    // mirror following the new leader (not bytes it read before, flushed
    // late).
    let living = (index + 1) % 3;
    let other = sources[living].client();
    let elected_end = eventually("a new leader", Duration::from_secs(60), || {
        let placed = other
            .metadata(&["events"])
            .map_err(|e| e.to_string())?
            .topics[0]
            .partitions[0]
            .clone();
        if placed.broker_id == leader {
            return Err(format!("still {leader}"));
        }
        other
            .list_offsets("events", 0, OffsetSpec::Latest, 0)
            .map(|(_, o)| o.end_offset)
            .map_err(|e| e.to_string())
    });
    let moved = eventually(
        "the copy moved past the new leader's first bytes",
        Duration::from_secs(60),
        || {
            if copy_end() > elected_end {
                Ok(killed.elapsed())
            } else {
                Err(format!("{} of {elected_end}", copy_end()))
            }
        },
    );
    writer.join().unwrap();
    if pause {
        sources[index].pause(false);
    } else {
        sources[index].restart();
    }
    let source_end = end(&sources[living].client(), "events");
    eventually("the copy caught up", Duration::from_secs(60), || {
        let at = copy_end();
        if at == source_end {
            Ok(())
        } else {
            Err(format!("{at} of {source_end}"))
        }
    });
    let status = std::process::Command::new(harness::binary("ringlog"))
        .args(["mirror", "status", "--metrics", &metrics])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&status.stdout).to_string();
    mirror.kill().unwrap();
    let output = mirror.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr).to_string();
    // The copy holds the source's messages, each once, in the source's
    // order (a format-1 producer's resends after the leader's death may
    // store a message twice in the source: the copy has them as the
    // source does), and none of the 60,000 is missing.
    let numbers = |client: &Client| -> Vec<u64> {
        read_all(client, "events", 0, 0)
            .iter()
            .map(|m| harness::check_numbered_payload(&m.value, SIZE))
            .collect()
    };
    let copied = numbers(&dst);
    let sourced = numbers(&sources[living].client());
    assert!(
        copied == sourced,
        "the copy's messages are not the source's"
    );
    let distinct: std::collections::BTreeSet<u64> = copied.iter().copied().collect();
    assert_eq!(distinct.len() as u64, MESSAGES, "every message copied");
    if let Some(d) = differ(
        &files(&analysis, "events", 0),
        &files(&sources[living], "events", 0),
    ) {
        panic!("the copy is the source's log: {d}");
    }
    let (code, out, err) = ringlog(
        &sources[living].address(),
        &["verify", "events", "--against", &analysis.address()],
    );
    assert_eq!(code, 0, "{out}{err}");
    eprintln!(
        "source leader {leader} {} with {at_kill} bytes copied: the copy held bytes of the new leader's epoch (past {elected_end}) {moved:?} after; {} messages copied, the source's {} in its order (its producer's resends included), all {MESSAGES} there; verify: {}\nmirror status:\n{table}\nthe mirror said:\n{}",
        if pause { "SIGSTOPped" } else { "SIGKILLed" },
        copied.len(),
        sourced.len(),
        out.trim(),
        said.lines().take(12).collect::<Vec<_>>().join("\n")
    );
}

/// Issue 45, items 5 and 6: security on in both clusters, a different
/// user on each side (`--from-user` for the source, `--user` for the
/// target), each with only the rights deploy/README.md lists. The copy is
/// made; a target login without alter on the copy, and a source login
/// without read on the topic, fail fast naming what is missing.
#[test]
fn r45_each_side_logs_in_as_its_own_user_with_only_the_rights_it_needs() {
    use super::security::{login, password_file, secured_broker, SECURE};
    use protocol::acl::AclRule;
    use protocol::scram::{Credential, ITERATIONS_MIN};
    let dir = harness::TempDir::new("mirror-security");
    let toml = format!("{SECURE}segment_bytes_min = 1024\n");
    let (dc1, analysis) = (secured_broker(&toml, &dir), secured_broker(&toml, &dir));
    let admin1 = login(&dc1.address(), "admin", "admin-secret");
    let admin2 = login(&analysis.address(), "admin", "admin-secret");
    let user = |name: &str| {
        (
            name.to_string(),
            Credential::new(format!("{name}-secret").as_bytes(), ITERATIONS_MIN),
        )
    };
    admin1.alter_users(&[user("reader")], &[]).unwrap();
    admin2.alter_users(&[user("copier")], &[]).unwrap();
    let rules = |texts: &[&str]| -> Vec<AclRule> {
        texts.iter().map(|t| AclRule::parse(t).unwrap()).collect()
    };
    let source_rights = rules(&["allow User:reader read topic:clicks"]);
    admin1.create_acls(&source_rights).unwrap();
    let target_rights = rules(&[
        "allow User:copier create topic:clicks",
        "allow User:copier alter topic:clicks",
        "allow User:copier read topic:clicks",
        "allow User:copier read group:mirror.dc1",
    ]);
    admin2.create_acls(&target_rights).unwrap();
    admin1.create_topic("clicks", 1, &small_segments()).unwrap();
    fill(&admin1, "clicks", "secret click", 2_000);
    let reader = password_file(dir.path(), "reader", "reader-secret");
    let copier = password_file(dir.path(), "copier", "copier-secret");
    let run = || {
        let started = Instant::now();
        let output = std::process::Command::new(harness::binary("ringlog"))
            .args(["--brokers", &analysis.address(), "--user", "copier"])
            .args(["--password-file", copier.to_str().unwrap()])
            .args(["mirror", "--from", &dc1.address(), "--topics", "clicks"])
            .args(["--name", "dc1", "--exit-at-end", "--from-user", "reader"])
            .args(["--from-password-file", reader.to_str().unwrap()])
            .env_remove("RINGLOG_USER")
            .env_remove("RINGLOG_PASSWORD_FILE")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code().unwrap_or(-1), said, started.elapsed())
    };
    let (code, said, _) = run();
    assert_eq!(code, 0, "{said}");
    if let Some(d) = differ(&files(&analysis, "clicks", 0), &files(&dc1, "clicks", 0)) {
        panic!("the segment files differ: {d}");
    }
    // Without alter on the copy in the target.
    fill(&admin1, "clicks", "more", 100);
    admin2
        .delete_acls(&rules(&["allow User:copier alter topic:clicks"]))
        .unwrap();
    let (code, no_alter, took) = run();
    assert_ne!(code, 0, "{no_alter}");
    assert!(
        no_alter.contains("alter") && no_alter.contains("clicks"),
        "{no_alter}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    admin2
        .create_acls(&rules(&["allow User:copier alter topic:clicks"]))
        .unwrap();
    // Without read on the topic in the source.
    admin1.delete_acls(&source_rights).unwrap();
    let (code, no_read, took) = run();
    assert_ne!(code, 0, "{no_read}");
    assert!(no_read.contains("read"), "{no_read}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    eprintln!(
        "reader@dc1 -> copier@analysis: copied, identical.\nwithout alter in the target: {}\nwithout read in the source: {}",
        no_alter.trim(),
        no_read.trim()
    );
}

/// Issue 45, item 3: the source's history cut below what the copy holds
/// by an unclean election, and written past the copy's end again while
/// the mirror was paused. The mirror finds the fork by leader epochs (its
/// reads name the epoch of the last chunk it copied) and stops that
/// partition, saying where and how many bytes the source no longer holds;
/// a mirror started afresh finds it by comparing the copy's last bytes
/// with the source's. The copy keeps every byte it had.
#[test]
fn r45_a_fork_of_the_source_under_the_copy_is_found_and_stops_the_copy() {
    const SIZE: usize = 100;
    let etcd = harness::etcd::Etcd::start();
    // Three brokers, two copies: the one holding none stays up throughout,
    // so the mirror's --from list always reaches the cluster (restarted
    // brokers come back on new ports).
    let mut brokers = cluster(&etcd, "fork", 3);
    let analysis = standalone();
    let client = brokers[0].client();
    client.create_topic("solo", 1, &replicated(2, 1)).unwrap();
    let produce = |client: &Client, range: std::ops::Range<u64>| {
        let mut p = Producer::new(
            client,
            "solo",
            ProducerConfig {
                acks: AckMode::All,
                batch_messages: 100,
                ..ProducerConfig::default()
            },
        )
        .unwrap();
        for n in range {
            p.send_to(0, None, &harness::numbered_payload(n, SIZE))
                .unwrap();
        }
        p.close(Duration::from_secs(60)).unwrap();
    };
    produce(&client, 0..500);
    let addresses: Vec<String> = brokers.iter().map(Broker::address).collect();
    let dir = harness::TempDir::new("fork-mirror");
    let said_path = dir.path().join("mirror.stderr");
    let said = || std::fs::read_to_string(&said_path).unwrap_or_default();
    let mut mirror = spawn_mirror(
        &analysis.address(),
        &[
            "--from",
            &addresses.join(","),
            "--topics",
            "solo",
            "--name",
            "dc1",
        ],
        std::fs::File::create(&said_path).unwrap(),
    );
    let dst = analysis.client();
    let copy_end = || {
        dst.list_offsets("solo", 0, OffsetSpec::Latest, 0)
            .map_or(0, |(_, o)| o.flushed_offset)
    };
    let wait_copied = |end: u64| {
        eventually("the copy caught up", Duration::from_secs(30), || {
            let at = copy_end();
            if at == end {
                Ok(())
            } else {
                Err(format!("{at} of {end}"))
            }
        });
    };
    wait_copied(end(&client, "solo"));
    // The follower goes; the leader alone takes 1,000 more (min ISR 1),
    // and the mirror copies them.
    let leader = metadata(&client, "solo").topics[0].partitions[0].broker_id;
    let led = brokers
        .iter()
        .position(|b| b.options().broker_id == leader)
        .unwrap();
    let placement = metadata(&client, "solo").topics[0].partitions[0].clone();
    let follower = *placement.replicas.iter().find(|&&id| id != leader).unwrap();
    let other = brokers
        .iter()
        .position(|b| b.options().broker_id == follower)
        .unwrap();
    brokers[other].kill9();
    eventually(
        "the ISR shrinks to the leader",
        Duration::from_secs(30),
        || {
            let isr = metadata(&client, "solo").topics[0].partitions[0]
                .isr
                .clone();
            if isr == vec![leader] {
                Ok(())
            } else {
                Err(format!("{isr:?}"))
            }
        },
    );
    produce(&client, 500..1_500);
    let forked_end = end(&client, "solo");
    wait_copied(forked_end);
    let copy = files(&analysis, "solo", 0);
    // The mirror sleeps through an unclean election of the other copy,
    // which then takes 3,000 messages of its own, past the copy's end.
    let pid = mirror.id().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    brokers[led].kill9();
    brokers[other].restart();
    let survivor = brokers[other].client();
    std::thread::sleep(Duration::from_secs(3));
    let (code, out, err) = ringlog(
        &brokers[other].address(),
        &[
            "partitions",
            "elect",
            "solo",
            "--partition",
            "0",
            "--unclean",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    eventually("the unclean leader serves", Duration::from_secs(30), || {
        survivor
            .list_offsets("solo", 0, OffsetSpec::Latest, 0)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    produce(&survivor, 10_000..13_000);
    let new_end = end(&survivor, "solo");
    assert!(new_end > forked_end, "{new_end} <= {forked_end}");
    signal("-CONT");
    // The running mirror: the epoch of its last chunk ends below its
    // position in the new leader's log.
    let status = eventually("the mirror stopped", Duration::from_secs(60), || {
        mirror
            .try_wait()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("running; it said:\n{}", said()))
    });
    let running = said();
    assert!(!status.success(), "{running}");
    assert!(running.contains("history forked at offset"), "{running}");
    if let Some(d) = differ(&files(&analysis, "solo", 0), &copy) {
        panic!("the copy kept its bytes: {d}");
    }
    // A mirror started afresh: no epoch to send, the digests find it.
    let (code, fresh, took) = mirror_once(
        &analysis.address(),
        &brokers[other].address(),
        &["--topics", "solo", "--name", "dc1"],
    );
    assert_ne!(code, 0, "{fresh}");
    assert!(fresh.contains("differ from the source's"), "{fresh}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    if let Some(d) = differ(&files(&analysis, "solo", 0), &copy) {
        panic!("the segment files differ: {d}");
    }
    let line = |text: &str, what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_default()
            .to_string()
    };
    eprintln!(
        "unclean election under a {forked_end}-byte copy, the new leader at {new_end}:\nrunning mirror: {}\nfresh mirror: {}",
        line(&running, "forked"),
        line(&fresh, "differ")
    );
}

/// Issue 45, item 3: lag counted against the source's end, never 0 while
/// behind. The target is killed while the source takes 2,000 more
/// messages: `mirror status` shows the bytes it is behind, lag seconds
/// growing and the last error; the target back, it catches up to lag 0.
#[test]
fn r45_mirror_status_shows_a_stalled_copy_behind_with_its_error() {
    let port = harness::free_ports(1);
    let dc1 = standalone();
    let mut analysis = Broker::start(BrokerOptions {
        config_toml: "segment_bytes_min = 1024\n".into(),
        listen: Some(format!("127.0.0.1:{port}")),
        shards: 1,
        ..BrokerOptions::default()
    });
    let src = dc1.client();
    src.create_topic("clicks", 1, &small_segments()).unwrap();
    fill(&src, "clicks", "before", 1_000);
    let metrics = format!("127.0.0.1:{}", harness::free_ports(1));
    let mut mirror = spawn_mirror(
        &analysis.address(),
        &[
            "--from",
            &dc1.address(),
            "--topics",
            "clicks",
            "--name",
            "dc1",
            "--metrics",
            &metrics,
        ],
        std::process::Stdio::null(),
    );
    let row = || {
        let output = std::process::Command::new(harness::binary("ringlog"))
            .args(["mirror", "status", "--metrics", &metrics])
            .output()
            .unwrap();
        let table = String::from_utf8_lossy(&output.stdout).to_string();
        let cells: Vec<String> = table
            .lines()
            .find(|l| l.starts_with("clicks\t0\t"))
            .unwrap_or_default()
            .split('\t')
            .map(str::to_string)
            .collect();
        (cells, table)
    };
    let caught_up = |what: &str| {
        eventually(what, Duration::from_secs(30), || {
            let (cells, table) = row();
            if cells.len() == 8 && cells[2] == "0" && cells[7] == "caught_up" {
                Ok(table)
            } else {
                Err(table)
            }
        })
    };
    caught_up("caught up");
    analysis.kill9();
    fill(&src, "clicks", "while the target is away", 2_000);
    let behind = end(&src, "clicks");
    let stalled = eventually("the stall shows", Duration::from_secs(30), || {
        let (cells, table) = row();
        let lag: u64 = cells.get(2).and_then(|c| c.parse().ok()).unwrap_or(0);
        let seconds: f64 = cells.get(3).and_then(|c| c.parse().ok()).unwrap_or(0.0);
        let state = cells.get(7).cloned().unwrap_or_default();
        if lag > 0 && seconds >= 3.0 && state.starts_with("retrying: ") {
            Ok(table)
        } else {
            Err(table)
        }
    });
    analysis.restart();
    let after = caught_up("caught up again");
    mirror.kill().unwrap();
    mirror.wait().unwrap();
    if let Some(d) = differ(&files(&analysis, "clicks", 0), &files(&dc1, "clicks", 0)) {
        panic!("the segment files differ: {d}");
    }
    eprintln!("the source at {behind}; the target killed:\n{stalled}the target back:\n{after}");
}

/// Issue 45, item 3: leadership handed over cleanly (`partitions
/// elect-leaders` gives the partition back to its preferred replica): the
/// old leader, alive, answers the mirror's reads NOT_LEADER, and the mirror
/// moves to the new one; the copy ends as the source's log.
#[test]
fn r45_the_mirror_follows_a_clean_leader_handover() {
    let etcd = harness::etcd::Etcd::start();
    let mut sources = cluster(&etcd, "handover", 3);
    let analysis = standalone();
    let src = sources[0].client();
    src.create_topic("events", 1, &replicated(3, 2)).unwrap();
    let preferred = metadata(&src, "events").topics[0].partitions[0].replicas[0];
    let index = sources
        .iter()
        .position(|b| b.options().broker_id == preferred)
        .unwrap();
    // The preferred replica restarts: another leads, and keeps leading once
    // it is back in sync.
    sources[index].kill9();
    sources[index].restart();
    let other = sources[(index + 1) % 3].client();
    eventually(
        "the preferred replica back in sync, not leading",
        Duration::from_secs(30),
        || {
            let p = metadata(&other, "events").topics[0].partitions[0].clone();
            if p.broker_id != preferred && p.isr.len() == 3 {
                Ok(())
            } else {
                Err(format!("{p:?}"))
            }
        },
    );
    let addresses: Vec<String> = sources.iter().map(Broker::address).collect();
    let mut mirror = spawn_mirror(
        &analysis.address(),
        &[
            "--from",
            &addresses.join(","),
            "--topics",
            "events",
            "--name",
            "dc1",
        ],
        std::process::Stdio::piped(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (address, stop) = (addresses.join(","), stop.clone());
        std::thread::spawn(move || {
            let client = Client::connect(&address).unwrap();
            let mut p = producer(&client, "events", AckMode::All, 100);
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                p.send_to(0, None, &harness::numbered_payload(n, 100))
                    .unwrap();
                n += 1;
                if n.is_multiple_of(500) {
                    p.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            p.flush().unwrap();
            n
        })
    };
    let dst = analysis.client();
    let copy_end = || {
        dst.list_offsets("events", 0, OffsetSpec::Latest, 0)
            .map_or(0, |(_, o)| o.flushed_offset)
    };
    eventually("the copy under way", Duration::from_secs(30), || {
        let at = copy_end();
        if at > 500_000 {
            Ok(())
        } else {
            Err(at.to_string())
        }
    });
    let (code, out, err) = ringlog(&addresses[0], &["partitions", "elect-leaders"]);
    assert_eq!(code, 0, "{out}{err}");
    let handed = Instant::now();
    let at_handover = copy_end();
    eventually(
        "the new leader is the preferred replica",
        Duration::from_secs(30),
        || {
            let p = metadata(&other, "events").topics[0].partitions[0].clone();
            if p.broker_id == preferred {
                Ok(())
            } else {
                Err(format!("{p:?}"))
            }
        },
    );
    let leader_at = handed.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let produced = writer.join().unwrap();
    let source_end = end(&sources[index].client(), "events");
    eventually("the copy caught up", Duration::from_secs(60), || {
        let at = copy_end();
        if at == source_end {
            Ok(())
        } else {
            Err(format!("{at} of {source_end}"))
        }
    });
    mirror.kill().unwrap();
    let said = String::from_utf8_lossy(&mirror.wait_with_output().unwrap().stderr).to_string();
    assert!(copy_end() > at_handover);
    if let Some(d) = differ(
        &files(&analysis, "events", 0),
        &files(&sources[index], "events", 0),
    ) {
        panic!("the copy is the source's log: {d}\n{said}");
    }
    eprintln!(
        "{produced} messages produced; leadership handed back to broker {preferred} {leader_at:?} after elect-leaders, with {at_handover} bytes copied; the copy ends at the source's {source_end}, its files the leader's. The mirror said:\n{}",
        said.lines().take(6).collect::<Vec<_>>().join("\n")
    );
}

/// Issue 45, item 5: a `--topics` that matches nothing, without
/// `--exit-at-end`: the mirror warns and says 0 in its metrics, and copies
/// the first matching topic the source gets.
#[test]
fn r45_a_mirror_matching_nothing_says_so_and_waits_for_a_topic() {
    let (dc1, analysis) = (standalone(), standalone());
    let metrics = format!("127.0.0.1:{}", harness::free_ports(1));
    let dir = harness::TempDir::new("mirror-nothing");
    let said_path = dir.path().join("mirror.stderr");
    let mut mirror = spawn_mirror(
        &analysis.address(),
        &[
            "--from",
            &dc1.address(),
            "--topics",
            "later.*",
            "--name",
            "dc1",
            "--metrics",
            &metrics,
        ],
        std::fs::File::create(&said_path).unwrap(),
    );
    let matched = || {
        // Not listening yet at the very start.
        std::net::TcpStream::connect(&metrics).ok()?;
        super::util::scrape(&metrics)
            .lines()
            .find_map(|l| l.strip_prefix("ringlog_mirror_topics_matched "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    eventually(
        "the metric says 0",
        Duration::from_secs(30),
        || match matched() {
            Some(0) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let warned = std::fs::read_to_string(&said_path).unwrap_or_default();
    assert!(warned.contains("matches none of the source's"), "{warned}");
    let src = dc1.client();
    src.create_topic("later1", 1, &small_segments()).unwrap();
    fill(&src, "later1", "late", 500);
    let source_end = end(&src, "later1");
    let dst = analysis.client();
    eventually(
        "the new topic copied",
        Duration::from_secs(30),
        || match dst.list_offsets("later1", 0, OffsetSpec::Latest, 0) {
            Ok((_, o)) if o.flushed_offset == source_end && matched() == Some(1) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    mirror.kill().unwrap();
    mirror.wait().unwrap();
    eprintln!(
        "matching nothing: {}; a topic created later was copied ({source_end} bytes)",
        warned.lines().next().unwrap_or_default()
    );
}
