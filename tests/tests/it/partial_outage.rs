//! Issue 23, item 5: a broker's death is a partial outage, never a total
//! one. Three brokers, a topic of six partitions (two on each), a group of
//! three members — two `ringlog consume --group` processes (one of them
//! bootstrapped at the broker that dies) and a Python `GroupConsumer` — and
//! an unkeyed producer; broker 2 killed with SIGKILL for 30 s and started
//! again. No member exits, the live brokers' partitions are consumed
//! throughout, `ringlog topic describe` lists every partition with broker
//! 2's `offline` (exit 0, one warning line), and every acknowledged message
//! is read at least once in the end.

use harness::etcd::Etcd;
use harness::{eventually, Broker, BrokerOptions, TempDir};
use protocol::client::{AckMode, Client, Producer, ProducerConfig, Receipt, TopicSettings};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOPIC: &str = "events";
const GROUP: &str = "g1";
const PARTITIONS: u32 = 6;

/// A member process and the file its consumed messages go to, one line
/// each: `partition:offset<TAB>value`.
struct Member {
    name: &'static str,
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Member {
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cli_member(name: &'static str, brokers: &str, dir: &Path) -> Member {
    let out = dir.join(format!("{name}.out"));
    let err = dir.join(format!("{name}.err"));
    let child = Command::new(harness::binary("ringlog"))
        .args(["--brokers", brokers, "consume", TOPIC, "--group", GROUP])
        .args([
            "--from",
            "earliest",
            "--print-offsets",
            "--session-timeout-ms",
            "6000",
        ])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    Member {
        name,
        child,
        out,
        err,
    }
}

const PYTHON_MEMBER: &str = r#"
import sys, time
import ringlog
brokers, group, topic, out_path = sys.argv[1:5]
client = ringlog.Client(brokers)
member = ringlog.GroupConsumer(client, group, [topic], member_name="python", session_timeout_ms=6000)
last = None
with open(out_path, "w", buffering=1) as out:
    while True:
        messages = member.poll()
        for m in messages:
            out.write(f"{m.partition}:{m.offset}\t{m.value.decode()}\n")
        now = sorted(str(o[0]) for o in member.outages())
        if now != last:
            print(f"outages: {member.outages()}", file=sys.stderr, flush=True)
            last = now
        if not messages:
            time.sleep(0.02)
"#;

fn python_member(brokers: &str, dir: &Path) -> Member {
    let script = dir.join("member.py");
    std::fs::write(&script, PYTHON_MEMBER).unwrap();
    let out = dir.join("python.out");
    let err = dir.join("python.err");
    let child = harness::python::command("partial-outage")
        .arg(&script)
        .args([brokers, GROUP, TOPIC])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    Member {
        name: "python",
        child,
        out,
        err,
    }
}

/// What the members consumed: every value, and the highest offset read per
/// partition.
fn consumed(members: &[Member]) -> (BTreeSet<u64>, BTreeMap<u32, u64>) {
    let mut values = BTreeSet::new();
    let mut progress = BTreeMap::new();
    for member in members {
        let text = std::fs::read_to_string(&member.out).unwrap_or_default();
        for line in text.lines() {
            let Some((place, value)) = line.split_once('\t') else {
                continue; // a line being written
            };
            let (Some((p, offset)), Ok(value)) = (place.split_once(':'), value.parse::<u64>())
            else {
                continue;
            };
            let (Ok(p), Ok(offset)) = (p.parse::<u32>(), offset.parse::<u64>()) else {
                continue;
            };
            values.insert(value);
            let top = progress.entry(p).or_insert(0);
            *top = (*top).max(offset);
        }
    }
    (values, progress)
}

/// An unkeyed producer sending numbered text values at about `rate` per
/// second until `stop`; returns the values acknowledged (acks=flushed).
fn produce(client: Client, stop: Arc<AtomicBool>, rate: u64) -> BTreeSet<u64> {
    let mut producer = Producer::new(
        &client,
        TOPIC,
        ProducerConfig {
            acks: AckMode::Flushed,
            batch_messages: 50,
            linger: Duration::from_millis(20),
            delivery_reports: true,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    let mut sent: HashMap<Receipt, u64> = HashMap::new();
    let mut acked = BTreeSet::new();
    let started = Instant::now();
    let mut i = 0u64;
    let mut collect = |producer: &mut Producer, sent: &mut HashMap<Receipt, u64>| {
        for delivery in producer.take_deliveries() {
            if delivery.stored().is_none() {
                continue;
            }
            for n in 0..u64::from(delivery.messages) {
                let receipt = Receipt {
                    partition: delivery.partition,
                    sequence: delivery.first_sequence + n,
                };
                if let Some(value) = sent.remove(&receipt) {
                    acked.insert(value);
                }
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        // An unkeyed send never fails for a partition that is down: the
        // partitioner skips it.
        let receipt = producer
            .send(None, format!("{i:012}").as_bytes())
            .unwrap_or_else(|e| panic!("unkeyed send {i}: {e}"));
        sent.insert(receipt, i);
        i += 1;
        if i.is_multiple_of(50) {
            collect(&mut producer, &mut sent);
            let due = Duration::from_secs_f64(i as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    let _ = producer.close(Duration::from_secs(30));
    collect(&mut producer, &mut sent);
    eprintln!(
        "producer: {i} sent, {} acknowledged, {} not",
        acked.len(),
        sent.len()
    );
    acked
}

#[test]
fn r23_5_one_broker_down_for_30_s_stops_no_member_and_loses_no_acknowledged_message() {
    let dir = TempDir::new("partial-outage");
    let etcd = Etcd::start();
    let mut brokers: Vec<Broker> = (1..=3)
        .map(|id| {
            Broker::start(BrokerOptions {
                shards: 1,
                ..BrokerOptions::clustered(&etcd, "outage", id)
            })
        })
        .collect();
    let client = brokers[0].client();
    eventually("three live brokers", Duration::from_secs(30), || {
        let n = client
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        if n == 3 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    });
    let created = client
        .create_topic(TOPIC, PARTITIONS, &TopicSettings::default())
        .unwrap();
    let on_2: Vec<u32> = created
        .partitions
        .iter()
        .filter(|p| p.broker_id == 2)
        .map(|p| p.partition)
        .collect();
    assert_eq!(on_2.len(), 2);
    let live: Vec<u32> = (0..PARTITIONS).filter(|p| !on_2.contains(p)).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let producing = {
        let client = brokers[0].client();
        let stop = stop.clone();
        std::thread::spawn(move || produce(client, stop, 600))
    };
    let mut members = vec![
        // Bootstrapped at the broker that dies: its group requests must
        // find the others.
        cli_member("cli-a", &brokers[1].address(), dir.path()),
        cli_member("cli-b", &brokers[0].address(), dir.path()),
        python_member(&brokers[2].address(), dir.path()),
    ];
    // Before the fault: three members, every partition owned and read
    // (the Python member takes longest to start), so no join blurs the
    // outage.
    eventually(
        "three members owning every partition before the fault",
        Duration::from_secs(120),
        || {
            let description = client.describe_group(GROUP).map_err(|e| e.to_string())?;
            let owned = description
                .partitions
                .iter()
                .filter(|p| !p.owner.is_empty())
                .count();
            let (_, progress) = consumed(&members);
            if description.view.members.len() == 3
                && owned == PARTITIONS as usize
                && progress.len() == PARTITIONS as usize
            {
                Ok(())
            } else {
                let errors: Vec<String> = members.iter().map(|m| m.stderr()).collect();
                Err(format!(
                    "{} members, {owned} owned, {progress:?} {errors:?}",
                    description.view.members.len()
                ))
            }
        },
    );
    // Progress from here on comes from the settled assignment.
    std::thread::sleep(Duration::from_secs(2));

    brokers[1].kill9();
    let killed = Instant::now();
    let mut samples = Vec::new();
    let mut described = false;
    while killed.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_secs(5));
        let (_, progress) = consumed(&members);
        eprintln!(
            "{:>4.1} s into the outage, highest offset read per partition: {progress:?}",
            killed.elapsed().as_secs_f64()
        );
        samples.push(progress);
        for member in &mut members {
            assert!(
                member.alive(),
                "member {} exited during the outage:\n{}",
                member.name,
                member.stderr()
            );
        }
        if !described && killed.elapsed() > Duration::from_secs(12) {
            // After broker 2's lease ran out; and once more while it is
            // only unreachable is covered by the first samples' members.
            let output = Command::new(harness::binary("ringlog"))
                .args([
                    "--brokers",
                    &brokers[0].address(),
                    "topic",
                    "describe",
                    TOPIC,
                ])
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            eprintln!("ringlog topic describe during the outage:\n{stdout}{stderr}");
            assert!(output.status.success(), "{stdout}{stderr}");
            for p in 0..PARTITIONS {
                let row = stdout
                    .lines()
                    .find(|l| l.starts_with(&format!("{p}\t")))
                    .unwrap_or_else(|| panic!("no row for partition {p}:\n{stdout}"));
                assert_eq!(row.contains("offline"), on_2.contains(&p), "{row}");
            }
            assert!(
                stderr.contains("warning: broker 2 does not answer"),
                "{stderr}"
            );
            described = true;
        }
    }
    // The live brokers' partitions moved on during the outage; broker 2's
    // stood still.
    let (first, last) = (&samples[0], &samples[samples.len() - 1]);
    for p in &live {
        assert!(
            last.get(p) > first.get(p),
            "partition {p} (a live broker's) was not consumed during the outage: {first:?} -> {last:?}"
        );
    }
    for p in &on_2 {
        assert_eq!(
            last.get(p),
            first.get(p),
            "partition {p} is on the dead broker"
        );
    }

    brokers[1].restart();
    let restarted = Instant::now();
    // The producer comes back to broker 2's partitions (it looks again at
    // most 10 s apart) and the members read them again.
    let before = last.clone();
    eventually(
        "broker 2's partitions produced to and consumed again",
        Duration::from_secs(60),
        || {
            let (_, progress) = consumed(&members);
            if on_2.iter().all(|p| progress.get(p) > before.get(p)) {
                Ok(())
            } else {
                Err(format!("{progress:?}"))
            }
        },
    );
    eprintln!(
        "broker 2's partitions written and read again {:.1} s after its restart",
        restarted.elapsed().as_secs_f64()
    );
    stop.store(true, Ordering::Relaxed);
    let acked = producing.join().unwrap();
    eventually(
        "every acknowledged message consumed",
        Duration::from_secs(90),
        || {
            let (values, _) = consumed(&members);
            let missing = acked.difference(&values).count();
            if missing == 0 {
                Ok(())
            } else {
                Err(format!("{missing} of {} not yet", acked.len()))
            }
        },
    );
    let (values, progress) = consumed(&members);
    eprintln!(
        "after the restart: every one of {} acknowledged messages read ({} distinct values) within {:.1} s; final offsets {progress:?}",
        acked.len(),
        values.len(),
        restarted.elapsed().as_secs_f64()
    );
    for member in &mut members {
        assert!(
            member.alive(),
            "member {} exited:\n{}",
            member.name,
            member.stderr()
        );
        eprintln!("{} stderr:\n{}", member.name, member.stderr());
    }
}
