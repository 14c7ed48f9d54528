//! Issue 44, stage 2: Kafka's classic consumer groups on ringlog's Kafka
//! listener, with Kafka's own clients — the Java client 4.4, kafka-python
//! and kcat (librdkafka) — in one group: partitions split disjointly, a
//! SIGKILLed member's partitions taken over from its committed offsets
//! (byte positions, often inside a batch), every message read at least
//! once and none skipped; franz-go in a group; on a three-broker cluster,
//! a group that outlives its coordinator's broker; and what hostile group
//! requests get.

use super::kafka_listener::{format_two, kcat, text, KAFKA_LIBS};
use harness::etcd::Etcd;
use harness::{Broker, BrokerOptions, TempDir};
use protocol::client::TopicSettings;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The group's first generation waits this long for more members.
const INITIAL_DELAY_MS: &str = "1000";

/// A group member running in its own process, its output in files.
struct Member {
    label: &'static str,
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Member {
    fn spawn(label: &'static str, mut command: Command, dir: &Path) -> Member {
        let out = dir.join(format!("{label}.out"));
        let err = dir.join(format!("{label}.err"));
        let child = command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: {e} (deploy/test-deps.sh installs the clients)"));
        Member {
            label,
            child,
            out,
            err,
        }
    }

    fn java(bootstrap: &str, topic: &str, group: &str, dir: &Path) -> Member {
        assert!(
            Path::new(KAFKA_LIBS)
                .join("kafka-clients-4.4.0.jar")
                .exists(),
            "Kafka 4.4's jars are not in {KAFKA_LIBS}: run `bash deploy/test-deps.sh`"
        );
        let mut command = Command::new("java");
        command
            .arg("-cp")
            .arg(format!("{KAFKA_LIBS}/*"))
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/GroupMember.java"))
            .args([bootstrap, topic, group]);
        Member::spawn("java", command, dir)
    }

    fn python(bootstrap: &str, topic: &str, group: &str, dir: &Path) -> Member {
        let mut command = harness::python::command_with("kafka-python", &["kafka-python==3.0.12"]);
        command
            .arg("-u")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/kafka_python_group.py"))
            .args([bootstrap, topic, group]);
        Member::spawn("python", command, dir)
    }

    fn kcat(bootstrap: &str, topic: &str, group: &str, dir: &Path) -> Member {
        let mut command = Command::new("kcat");
        command.args([
            "-b",
            bootstrap,
            "-G",
            group,
            topic,
            "-u",
            "-f",
            "r %p %o %s\n",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            "session.timeout.ms=10000",
            "-X",
            "auto.commit.interval.ms=500",
        ]);
        Member::spawn("kcat", command, dir)
    }

    fn output(&self) -> (String, String) {
        (
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default(),
        )
    }

    /// Its latest assignment, if it has had one.
    fn assignment(&self) -> Option<BTreeSet<u32>> {
        let (out, err) = self.output();
        // The Java and Python members print `assigned 0,3`; kcat logs
        // `% Group g rebalanced (memberid …): assigned: t [0], t [3]`.
        let mut latest = None;
        for line in out.lines() {
            if let Some(list) = line.strip_prefix("assigned ") {
                latest = Some(list.split(',').filter_map(|p| p.parse().ok()).collect());
            } else if line == "assigned" {
                latest = Some(BTreeSet::new());
            }
        }
        for line in err.lines().filter(|l| l.contains("rebalanced")) {
            if let Some((_, list)) = line.split_once("assigned: ") {
                latest = Some(
                    list.split(", ")
                        .filter_map(|p| p.split_once('[')?.1.trim_end_matches(']').parse().ok())
                        .collect(),
                );
            } else if line.contains("revoked") {
                latest = Some(BTreeSet::new());
            }
        }
        latest
    }

    /// The values it has read.
    fn values(&self) -> Vec<u64> {
        self.output()
            .0
            .lines()
            .filter_map(|l| l.strip_prefix("r ")?.split(' ').nth(2)?.parse().ok())
            .collect()
    }
}

/// Produces `per_partition` numbered values into each of `partitions`
/// with kcat: partition p holds p × per_partition ….
fn produce(bootstrap: &str, topic: &str, partitions: u64, per_partition: u64) {
    for p in 0..partitions {
        let lines: String = (p * per_partition..(p + 1) * per_partition)
            .map(|n| format!("{n}\n"))
            .collect();
        let output = kcat(
            &["-P", "-b", bootstrap, "-t", topic, "-p", &p.to_string()],
            &lines,
        );
        assert!(output.status.success(), "{:?}", text(&output));
    }
}

/// True when the members' latest assignments split `partitions` disjointly
/// with none empty.
fn split(members: &[&Member], partitions: u32) -> bool {
    let mut seen = BTreeSet::new();
    for m in members {
        match m.assignment() {
            Some(a) if !a.is_empty() => {
                for p in a {
                    if !seen.insert(p) {
                        return false;
                    }
                }
            }
            _ => return false,
        }
    }
    seen == (0..partitions).collect()
}

fn wait_for(what: &str, limit: Duration, members: &[&Member], mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            let outputs: Vec<String> = members
                .iter()
                .map(|m| {
                    let (out, err) = m.output();
                    let tail = |s: &str| {
                        let lines: Vec<&str> = s.lines().collect();
                        lines[lines.len().saturating_sub(15)..].join("\n")
                    };
                    format!(
                        "--- {}: {:?}\n{}\n{}",
                        m.label,
                        m.assignment(),
                        tail(&out),
                        tail(&err)
                    )
                })
                .collect();
            panic!("{what}: not within {limit:?}\n{}", outputs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every value of 0..total read by some member.
fn all_read(members: &[&Member], total: u64) -> bool {
    let read: BTreeSet<u64> = members.iter().flat_map(|m| m.values()).collect();
    read.len() as u64 == total && read.iter().all(|v| *v < total)
}

#[test]
fn a_group_of_java_python_and_kcat_members_splits_partitions_and_takes_over_a_killed_one() {
    let broker = Broker::start(BrokerOptions {
        args: vec![
            "--kafka-listen".into(),
            "127.0.0.1:0".into(),
            "--kafka-group-initial-delay-ms".into(),
            INITIAL_DELAY_MS.into(),
        ],
        ..BrokerOptions::default()
    });
    let client = broker.client();
    format_two(&client, "mix", 6, TopicSettings::default());
    let bootstrap = &broker.kafka[0];
    let (partitions, per_partition) = (6, 3_000);
    produce(bootstrap, "mix", partitions, per_partition);
    let total = partitions * per_partition;
    let dir = TempDir::new("kafka-group");
    // The slow readers first: kcat reads whatever it is given at once, so
    // it joins once they read.
    let java = Member::java(bootstrap, "mix", "mixed", dir.path());
    let python = Member::python(bootstrap, "mix", "mixed", dir.path());
    let both = [&java, &python];
    wait_for(
        "the Java and Python members read",
        Duration::from_secs(90),
        &both,
        || !java.values().is_empty() && !python.values().is_empty(),
    );
    let kcat = Member::kcat(bootstrap, "mix", "mixed", dir.path());
    let all = [&java, &python, &kcat];
    wait_for(
        "three members, disjoint partitions",
        Duration::from_secs(90),
        &all,
        || split(&all, partitions as u32),
    );
    // Java reads 7 records a poll and commits every 500 ms: its last
    // commit is inside a batch, behind what it printed.
    wait_for(
        "the Java member reads",
        Duration::from_secs(60),
        &all,
        || java.values().len() >= 50,
    );
    let mut java = java;
    java.child.kill().unwrap();
    java.child.wait().unwrap();
    let rest = [&python, &kcat];
    wait_for(
        "the two members left take the killed one's partitions",
        Duration::from_secs(90),
        &rest,
        || split(&rest, partitions as u32),
    );
    let all = [&java, &python, &kcat];
    wait_for(
        "every message read at least once",
        Duration::from_secs(120),
        &all,
        || all_read(&all, total),
    );
    let read: usize = all.iter().map(|m| m.values().len()).sum();
    println!(
        "read {read} records for {total} messages ({} again after the takeover)",
        read as u64 - total
    );
    // The broker stored the group and its offsets in its data directory.
    let stored =
        std::fs::read_to_string(broker.data_dir().join("kafka-groups/mixed.json")).unwrap();
    assert!(stored.contains("\"topic\":\"mix\""), "{stored}");
    // ringlog's CLI lists and describes it beside its own groups.
    let ringlog = |args: &[&str]| {
        let output = Command::new(harness::binary("ringlog"))
            .args(["--brokers", &broker.address()])
            .args(args)
            .output()
            .unwrap();
        let (out, err) = text(&output);
        assert!(output.status.success(), "{out}{err}");
        out
    };
    assert_eq!(ringlog(&["groups", "list"]), "mixed\n");
    let described = ringlog(&["groups", "describe", "mixed"]);
    assert!(
        described.starts_with("group mixed members 2 topics mix\n"),
        "{described}"
    );
    // Every partition owned by one of the two members left, with a
    // committed offset and a lag in bytes.
    let rows: Vec<&str> = described
        .lines()
        .filter(|l| l.starts_with("mix\t"))
        .collect();
    assert_eq!(rows.len(), 6, "{described}");
    for row in rows {
        let fields: Vec<&str> = row.split('\t').collect();
        assert!(
            fields[2].starts_with("python-member") || fields[2].starts_with("rdkafka"),
            "{row}"
        );
        assert_ne!(fields[3], "-", "{row}");
    }
    println!("{described}");
}

#[test]
fn a_kafka_group_outlives_its_coordinators_broker_on_a_three_broker_cluster() {
    let etcd = Etcd::start();
    let options = (1..=3)
        .map(|id| {
            let mut options = super::replication::options(&etcd, "kgroups", id);
            options.args.extend([
                "--kafka-listen".into(),
                "127.0.0.1:0".into(),
                "--kafka-group-initial-delay-ms".into(),
                INITIAL_DELAY_MS.into(),
            ]);
            options
        })
        .collect();
    let mut brokers = super::replication::cluster_of(options);
    let client = brokers[0].client();
    format_two(&client, "cg", 4, super::replication::replicated(3, 2));
    let bootstrap = brokers
        .iter()
        .map(|b| b.kafka[0].clone())
        .collect::<Vec<_>>()
        .join(",");
    let (partitions, per_partition) = (4, 3_000);
    produce(&bootstrap, "cg", partitions, per_partition);
    let total = partitions * per_partition;
    let dir = TempDir::new("kafka-group-cluster");
    let java = Member::java(&bootstrap, "cg", "survivors", dir.path());
    wait_for(
        "the Java member reads",
        Duration::from_secs(90),
        &[&java],
        || java.values().len() >= 50,
    );
    let kcat = Member::kcat(&bootstrap, "cg", "survivors", dir.path());
    let both = [&java, &kcat];
    wait_for(
        "two members, disjoint partitions",
        Duration::from_secs(90),
        &both,
        || split(&both, partitions as u32),
    );
    // franz-go in a group of its own, on the same three copies.
    format_two(&client, "fz3", 2, super::replication::replicated(3, 2));
    franz(&bootstrap, "fz3", 3_000, "franz3");
    // The group's coordinator: the broker that took it.
    let coordinating = |b: &Broker| {
        b.log()
            .contains("kafka group: coordinating, a new group group=survivors")
    };
    let holder = brokers
        .iter()
        .position(coordinating)
        .expect("a broker logged that it coordinates the group");
    assert_eq!(brokers.iter().filter(|b| coordinating(b)).count(), 1);
    brokers[holder].kill9();
    // Its lease expires, a member finds another coordinator, which resumes
    // the stored generation; the members go on from their commits.
    wait_for(
        "every message read at least once after the coordinator's death",
        Duration::from_secs(120),
        &both,
        || all_read(&both, total),
    );
    let resumed = brokers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != holder)
        .any(|(_, b)| {
            b.log()
                .lines()
                .any(|l| l.contains("resumed from the registry") && l.contains("group=survivors"))
        });
    assert!(resumed, "no broker resumed the group from the registry");
    wait_for(
        "both members in the group again",
        Duration::from_secs(60),
        &both,
        || split(&both, partitions as u32),
    );
}

/// A request's answer on `stream`, after its correlation id.
fn ask(stream: &mut std::net::TcpStream, api: i16, version: i16, body: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    stream
        .write_all(&super::kafka_listener::frame(api, version, 1, body))
        .unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).unwrap();
    let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut answer).unwrap();
    answer.split_off(4)
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A JoinGroup v4 body: `consumer`, one `range` protocol of `metadata`.
fn join_body(group: &str, member: &str, session_ms: i32, metadata: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    string(&mut b, group);
    b.extend_from_slice(&session_ms.to_be_bytes());
    b.extend_from_slice(&30_000i32.to_be_bytes());
    string(&mut b, member);
    string(&mut b, "consumer");
    b.extend_from_slice(&1i32.to_be_bytes());
    string(&mut b, "range");
    b.extend_from_slice(&(metadata.len() as i32).to_be_bytes());
    b.extend_from_slice(metadata);
    b
}

/// A JoinGroup v4 answer's error code (after its throttle time).
fn join_error(answer: &[u8]) -> i16 {
    i16::from_be_bytes([answer[4], answer[5]])
}

#[test]
fn hostile_group_requests_get_kafkas_errors_and_bounded_memory() {
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        args: vec!["--kafka-listen".into(), "127.0.0.1:0".into()],
        ..BrokerOptions::default()
    });
    let mut stream = super::kafka_listener::connect(&broker.kafka[0]);
    // FindCoordinator v1 for a name that cannot be a key: INVALID_GROUP_ID (24).
    let mut b = Vec::new();
    string(&mut b, "a/b");
    b.push(0);
    let answer = ask(&mut stream, 10, 1, &b);
    assert_eq!(i16::from_be_bytes([answer[4], answer[5]]), 24);
    // A session timeout out of range: INVALID_SESSION_TIMEOUT (26).
    let answer = ask(&mut stream, 11, 4, &join_body("g", "", 100, b""));
    assert_eq!(join_error(&answer), 26);
    // An id nobody was given: UNKNOWN_MEMBER_ID (25).
    let answer = ask(&mut stream, 11, 4, &join_body("g", "forged", 10_000, b""));
    assert_eq!(join_error(&answer), 25);
    // A flood of new members asking for ids: each is given one (79) until
    // the group's pending ids are full, then GROUP_MAX_SIZE_REACHED (81).
    let mut given = 0;
    let mut refused = 0;
    for _ in 0..10_050 {
        match join_error(&ask(&mut stream, 11, 4, &join_body("g", "", 10_000, b"x"))) {
            79 => given += 1,
            81 => refused += 1,
            other => panic!("error {other}"),
        }
    }
    assert_eq!((given, refused), (10_000, 50));
    // Metadata of a megabyte and one byte: INVALID_REQUEST (42).
    let big = vec![0u8; (1 << 20) + 1];
    let answer = ask(&mut stream, 11, 4, &join_body("h", "", 10_000, &big));
    assert_eq!(join_error(&answer), 42);
    // A commit for a member of a generation that never was:
    // UNKNOWN_MEMBER_ID; a commit with no member while the group is
    // empty (an assign() user's) is taken, and read back.
    format_two(&broker.client(), "t", 1, TopicSettings::default());
    let commit = |generation: i32, member: &str| {
        let mut b = Vec::new();
        string(&mut b, "solo");
        b.extend_from_slice(&generation.to_be_bytes());
        string(&mut b, member);
        b.extend_from_slice(&1i32.to_be_bytes());
        string(&mut b, "t");
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&77i64.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        string(&mut b, "meta");
        b
    };
    // v6: throttle, topics[name, partitions[index, error]]
    let error_of = |answer: &[u8]| {
        let at = answer.len() - 2;
        i16::from_be_bytes([answer[at], answer[at + 1]])
    };
    assert_eq!(error_of(&ask(&mut stream, 8, 6, &commit(5, "nobody"))), 25);
    assert_eq!(error_of(&ask(&mut stream, 8, 6, &commit(-1, ""))), 0);
    let mut b = Vec::new();
    string(&mut b, "solo");
    b.extend_from_slice(&(-1i32).to_be_bytes()); // every topic
    let answer = ask(&mut stream, 9, 5, &b);
    // throttle, topic count, "t", partition count, partition index.
    let offset_at = 4 + 4 + 2 + 1 + 4 + 4;
    assert_eq!(
        i64::from_be_bytes(answer[offset_at..offset_at + 8].try_into().unwrap()),
        77,
        "{answer:?}"
    );
    // The listener goes on.
    assert!(!super::kafka_listener::api_versions(&mut stream).is_empty());
}

/// Builds tests/kafka/franz (franz-go from the Go module proxy) once.
fn franz_check() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/franz");
            let out = harness::python::repo_root().join("target/tools/franz-check");
            let output = Command::new("go")
                .args(["build", "-o"])
                .arg(&out)
                .arg(".")
                .current_dir(&source)
                .output()
                .expect("go (on the machine; franz-go comes from the Go module proxy)");
            assert!(output.status.success(), "{:?}", text(&output));
            out
        })
        .clone()
}

/// franz-go produces COUNT records to `topic` and reads them back in
/// group `group`, committing as it goes.
fn franz(bootstrap: &str, topic: &str, count: u32, group: &str) {
    let output = Command::new("timeout")
        .arg("120")
        .arg(franz_check())
        .args([bootstrap, topic, &count.to_string(), group])
        .output()
        .unwrap();
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    assert!(out.contains(&format!("produced {count}\n")), "{out}{err}");
    assert!(
        out.contains(&format!("consumed {count} bad 0\n")),
        "{out}{err}"
    );
    assert!(out.contains("committed_partitions "), "{out}{err}");
}

#[test]
fn franz_go_produces_and_consumes_in_a_group() {
    let broker = Broker::start(BrokerOptions {
        args: vec![
            "--kafka-listen".into(),
            "127.0.0.1:0".into(),
            "--kafka-group-initial-delay-ms".into(),
            INITIAL_DELAY_MS.into(),
        ],
        ..BrokerOptions::default()
    });
    format_two(&broker.client(), "fz", 3, TopicSettings::default());
    franz(&broker.kafka[0], "fz", 5_000, "franz");
    let stored =
        std::fs::read_to_string(broker.data_dir().join("kafka-groups/franz.json")).unwrap();
    assert_eq!(stored.matches("\"topic\":\"fz\"").count(), 3, "{stored}");
}
