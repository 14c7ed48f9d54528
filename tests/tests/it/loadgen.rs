//! loadgen against a real broker: exact counts, the e2e checker, the JSON
//! fields, and `paper` end to end with a tiny N.

use harness::{binary, Broker, BrokerOptions, TempDir};
use protocol::client::OffsetSpec;
use serde_json::Value;
use std::process::Command;

fn loadgen(args: &[&str]) -> (String, String) {
    let output = Command::new(binary("loadgen")).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "loadgen {args:?} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

fn json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn has(value: &Value, path: &str) {
    let mut v = value;
    for key in path.split('.') {
        v = v
            .get(key)
            .unwrap_or_else(|| panic!("JSON lacks {path} (at {key}): {value:#}"));
    }
}

#[test]
fn produce_and_consume_count_exactly_and_report_every_field() {
    let broker = Broker::start(BrokerOptions::default());
    let dir = TempDir::new("loadgen");
    let produce_json = dir.path().join("produce.json");
    let (stdout, _) = loadgen(&[
        "--brokers",
        &broker.address(),
        "produce",
        "--topic",
        "lg",
        "--partitions",
        "3",
        "--num-records",
        "5000",
        "--record-size",
        "100",
        "--batch",
        "7",
        "--acks",
        "written",
        "--json",
        produce_json.to_str().unwrap(),
    ]);
    assert!(stdout.contains("5000 records sent"), "{stdout}");
    let report = json(&produce_json);
    assert_eq!(report["summary"]["messages"], 5000);
    assert_eq!(report["summary"]["bytes"], 500_000);
    assert_eq!(report["produce"]["stored_bytes"], 5000 * 109);
    for field in [
        "workload",
        "brokers",
        "config.topic",
        "config.batch",
        "config.acks",
        "config.rate",
        "summary.elapsed_s",
        "summary.msgs_per_sec",
        "summary.mb_per_sec",
        "summary.series",
        "summary.latency.p50_ms",
        "summary.latency.p95_ms",
        "summary.latency.p99_ms",
        "summary.latency.p999_ms",
        "summary.latency.avg_ms",
        "summary.latency.max_ms",
        "summary.latency.curve",
        "produce.all_flushed_after_s",
        "broker_config.brokers",
        "broker_config.broker_version",
        "broker_config.topic.flush_interval_ms",
        "environment.hostname",
        "environment.kernel",
        "environment.cores",
        "environment.cpu",
        "environment.memory_gib",
        "environment.git_revision",
        "environment.loadgen_version",
        "environment.unix_time",
    ] {
        has(&report, field);
    }
    // The report names the broker's build, as its handshake gave it.
    let version = report["broker_config"]["broker_version"].as_str().unwrap();
    assert!(
        version.starts_with(&format!("{} (", env!("CARGO_PKG_VERSION"))) && version.ends_with(')'),
        "{version}"
    );
    // The broker agrees: 5000 messages of 100 + 9 bytes.
    let client = broker.client();
    let stored: u64 = (0..3)
        .map(|p| {
            client
                .list_offsets("lg", p, OffsetSpec::Latest, 0)
                .unwrap()
                .1
                .end_offset
        })
        .sum();
    assert_eq!(stored, 5000 * 109);

    let consume_json = dir.path().join("consume.json");
    let plot = dir.path().join("plots");
    let (stdout, _) = loadgen(&[
        "--brokers",
        &broker.address(),
        "consume",
        "--topic",
        "lg",
        "--messages",
        "5000",
        "--consumers",
        "2",
        "--json",
        consume_json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(stdout.contains("5000 records received"), "{stdout}");
    assert_eq!(json(&consume_json)["summary"]["messages"], 5000);
    assert!(plot.join("throughput.svg").exists());

    // One partition per consumer, each fetching ahead: the same count.
    let prefetch_json = dir.path().join("prefetch.json");
    let (stdout, _) = loadgen(&[
        "--brokers",
        &broker.address(),
        "consume",
        "--topic",
        "lg",
        "--messages",
        "5000",
        "--consumers",
        "3",
        "--prefetch",
        "2",
        "--fetch-bytes",
        "1000",
        "--json",
        prefetch_json.to_str().unwrap(),
    ]);
    assert!(stdout.contains("5000 records received"), "{stdout}");
    let summary = &json(&prefetch_json)["summary"];
    assert_eq!(summary["messages"], 5000, "{summary:#}");
    assert_eq!(summary["bytes"], 5000 * 100, "{summary:#}");
}

#[test]
fn e2e_detects_an_injected_loss_and_an_injected_duplicate() {
    let broker = Broker::start(BrokerOptions::default());
    let dir = TempDir::new("e2e");
    let run = |name: &str, extra: &[&str]| -> Value {
        let path = dir.path().join(format!("{name}.json"));
        let mut args = vec![
            "--brokers",
            &broker.shards[0],
            "e2e",
            "--topic",
            name,
            "--partitions",
            "2",
            "--size",
            "64",
            "--grace",
            "1",
            "--json",
            path.to_str().unwrap(),
        ];
        if !extra.contains(&"--duration") {
            args.extend_from_slice(&["--messages", "2000"]);
        }
        args.extend_from_slice(extra);
        loadgen(&args);
        json(&path)
    };
    let clean = run("clean", &[]);
    assert_eq!(clean["e2e"]["sent"], 2000);
    assert_eq!(clean["e2e"]["received"], 2000);
    assert_eq!(clean["e2e"]["lost"], 0);
    assert_eq!(clean["e2e"]["duplicated"], 0);
    assert_eq!(clean["e2e"]["out_of_order"], 0);
    has(&clean, "summary.latency.p99_ms");

    let lossy = run("lossy", &["--inject-loss", "10"]);
    assert_eq!(lossy["e2e"]["lost"], 1);
    assert_eq!(lossy["e2e"]["duplicated"], 0);
    assert_eq!(lossy["e2e"]["partitions"][0]["lost"], 1);

    let doubled = run("doubled", &["--inject-duplicate", "20"]);
    assert_eq!(doubled["e2e"]["lost"], 0);
    assert_eq!(doubled["e2e"]["duplicated"], 1);

    // Two producers (one per partition) and two consumers: still exact.
    let parallel = run("parallel", &["--producers", "2", "--consumers", "2"]);
    assert_eq!(parallel["e2e"]["sent"], 2000);
    assert_eq!(parallel["e2e"]["received"], 2000);
    assert_eq!(parallel["e2e"]["partitions"][1]["sent"], 1000);
    assert_eq!(parallel["e2e"]["lost"], 0);
    assert_eq!(parallel["e2e"]["out_of_order"], 0);

    // A timed, paced run: whatever was sent in that second arrived.
    let timed = run("timed", &["--duration", "1", "--rate", "3000"]);
    let sent = timed["e2e"]["sent"].as_u64().unwrap();
    assert!(sent > 0, "{timed:#}");
    assert_eq!(timed["e2e"]["received"], sent);
    assert_eq!(timed["e2e"]["lost"], 0);

    // More producers than partitions cannot keep one writer per partition.
    let output = Command::new(binary("loadgen"))
        .args(["--brokers", &broker.shards[0], "e2e", "--topic", "refused"])
        .args(["--partitions", "2", "--messages", "10", "--producers", "3"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("3 producers need at least 3 partitions"),
        "{stderr}"
    );
    let topics = broker.client().metadata(&[]).unwrap().topics;
    assert!(
        topics.iter().all(|t| t.name != "refused"),
        "a refused run created its topic"
    );
}

#[test]
fn paper_runs_end_to_end_with_its_own_broker_and_marks_unreachable_peers_not_run() {
    let dir = TempDir::new("paper");
    let out = dir.path().join("out");
    let (stdout, stderr) = loadgen(&[
        "paper",
        "--messages",
        "3000",
        "--systems",
        "ringlog,rabbitmq,activemq",
        "--rabbitmq-url",
        "amqp://guest:guest@127.0.0.1:1/%2f",
        "--activemq-address",
        "127.0.0.1:1",
        "--shards",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    for file in [
        "paper.txt",
        "paper.json",
        "paper.svg",
        "throughput-produce-batch1.svg",
        "throughput-produce-batch50.svg",
        "throughput-consume.svg",
    ] {
        assert!(out.join(file).exists(), "{file} missing; stderr:\n{stderr}");
    }
    assert!(stdout.contains("ringlog   produce, batch 1"), "{stdout}");
    assert!(
        stdout.contains("deploy/peers.sh start rabbitmq"),
        "{stdout}"
    );
    assert!(
        stdout.contains("deploy/peers.sh start activemq"),
        "{stdout}"
    );
    let report = json(&out.join("paper.json"));
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 9);
    for row in rows {
        let ran = row["status"] == "ok";
        assert_eq!(ran, row["system"] == "ringlog", "{row:#}");
        if ran {
            assert_eq!(row["result"]["messages"], 3000);
        }
    }
    assert_eq!(report["disk"][0]["overhead_bytes"], 9.0);
    has(&report, "environment.git_revision");
    has(&report, "ringlog_config.topic.segment_bytes");
    assert!(report["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["ratio"].is_null()));
}

#[test]
fn a_group_of_loadgen_consumers_reads_every_message_once_and_failover_is_measured() {
    let etcd = harness::etcd::Etcd::start();
    let brokers: Vec<Broker> = (1..=2)
        .map(|id| Broker::start(BrokerOptions::clustered(&etcd, "lg", id)))
        .collect();
    let address = brokers[0].address();
    // Both live in the first one's eyes before the topic is spread over
    // them (CI once saw broker 2 still "down" to it: a started broker's
    // registration reaches the others through the watch a moment later).
    super::util::wait_for_brokers(&brokers[0].client(), 2);
    loadgen(&[
        "--brokers",
        &address,
        "produce",
        "--topic",
        "shared",
        "--partitions",
        "4",
        "--num-records",
        "40000",
        "--record-size",
        "50",
        "--batch",
        "50",
        "--acks",
        "flushed",
    ]);
    let (stdout, _) = loadgen(&[
        "--brokers",
        &address,
        "consume",
        "--topic",
        "shared",
        "--group",
        "lg-group",
        "--consumers",
        "2",
        "--messages",
        "40000",
    ]);
    assert!(
        stdout.contains("40000 messages once, 0 duplicates, 0 bytes skipped"),
        "{stdout}"
    );
    assert!(
        stdout.contains("lag at the end 0 bytes (0 partitions without a committed offset)"),
        "{stdout}"
    );

    let (stdout, _) = loadgen(&[
        "--brokers",
        &address,
        "failover",
        "--topic",
        "fo",
        "--partitions",
        "4",
        "--members",
        "2",
        "--session-timeout-ms",
        "4000",
        "--rate",
        "2000",
    ]);
    let seconds = |label: &str| -> f64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} line in {stdout}"));
        line.split("consumed again after ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no time in {line:?}"))
    };
    let killed = seconds("SIGKILL of a member");
    let left = seconds("clean leave of a member");
    // A dead member is noticed only when its session (4 s) expires; a clean
    // leave does not wait for it. The session's lease was last renewed by the
    // member's last heartbeat before the kill, up to one heartbeat period
    // (1 s) plus that heartbeat's long-poll (200 ms) earlier, so it can expire
    // that much less than 4 s after the SIGKILL (CI measured 3.94 s).
    let heartbeat_slack = 1.5;
    assert!(killed >= 4.0 - heartbeat_slack, "{stdout}");
    assert!(left < killed, "{stdout}");
    assert!(left < 4.0, "{stdout}");
    eprintln!("{stdout}");
}

/// Issue 9, item 4: `loadgen sweep` measures the maximum, then runs at
/// fractions of it and at given rates, and reports publish and end-to-end
/// percentiles per rate and ack mode, with no message lost.
#[test]
fn a_sweep_reports_latency_percentiles_per_rate_and_ack_mode() {
    let broker = Broker::start(BrokerOptions::default());
    let dir = TempDir::new("sweep");
    let report_json = dir.path().join("sweep.json");
    let (stdout, _) = loadgen(&[
        "--brokers",
        &broker.address(),
        "sweep",
        "--rates",
        "50%,2000",
        "--acks",
        "written,flushed",
        "--duration",
        "1.5",
        "--warmup",
        "0.5",
        "--json",
        report_json.to_str().unwrap(),
        "--plot",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        stdout.contains("maximum end-to-end rate, acks written"),
        "{stdout}"
    );
    let report = json(&report_json);
    let points = report["result"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "two rates × two ack modes: {report:#}");
    let maximum = report["result"]["maximum"].as_array().unwrap();
    assert_eq!(maximum.len(), 2);
    for point in points {
        for field in [
            "publish.p50_ms",
            "publish.p99_ms",
            "publish.p999_ms",
            "e2e.p99_ms",
            "e2e.max_ms",
        ] {
            has(point, field);
        }
        assert_eq!(point["lost"], 0, "{point:#}");
        assert!(point["achieved_msgs_per_sec"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(points[1]["rate"], "2000");
    assert_eq!(points[1]["target_msgs_per_sec"], 2000.0);
    let half = points[0]["target_msgs_per_sec"].as_f64().unwrap();
    let max = maximum[0][1].as_f64().unwrap();
    assert!((half - max / 2.0).abs() < 1.0, "{half} is half of {max}");
    let svg = std::fs::read_to_string(dir.path().join("sweep.svg")).unwrap();
    assert!(
        svg.contains("written publish p99"),
        "the chart has its series"
    );
}

/// `loadgen sweep --rounds`: every rate runs that many times, interleaved,
/// and the report adds each rate's medians; a round count of 0 is refused
/// before anything runs.
#[test]
fn a_sweep_with_rounds_runs_each_rate_again_and_reports_medians() {
    let broker = Broker::start(BrokerOptions::default());
    let dir = TempDir::new("sweep-rounds");
    let report_json = dir.path().join("sweep.json");
    let (stdout, _) = loadgen(&[
        "--brokers",
        &broker.address(),
        "sweep",
        "--rates",
        "1000,3000",
        "--acks",
        "written",
        "--rounds",
        "2",
        "--duration",
        "1",
        "--warmup",
        "0.3",
        "--json",
        report_json.to_str().unwrap(),
    ]);
    assert!(stdout.contains("median of 2 rounds:"), "{stdout}");
    let report = json(&report_json);
    let points = report["result"]["points"].as_array().unwrap();
    let order: Vec<(String, u64)> = points
        .iter()
        .map(|p| {
            (
                p["rate"].as_str().unwrap().to_string(),
                p["round"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [("1000", 1), ("3000", 1), ("1000", 2), ("3000", 2)].map(|(r, n)| (r.to_string(), n)),
        "rounds interleave the rates"
    );
    let medians = report["result"]["medians"].as_array().unwrap();
    assert_eq!(medians.len(), 2, "{report:#}");
    for m in medians {
        has(m, "publish.p99_ms");
        assert_eq!(m["round"], 0);
        assert_eq!(m["lost"], 0, "{m:#}");
    }
    let output = Command::new(binary("loadgen"))
        .args(["--brokers", &broker.address(), "sweep", "--rounds", "0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--rounds"), "{stderr}");
}

/// `loadgen replication` end to end with tiny sizes: its own etcd and three
/// brokers, every figure reported, and the catch-up sent zero-copy.
#[test]
fn replication_figures_run_on_their_own_cluster_and_the_catch_up_is_zero_copy() {
    let dir = TempDir::new("loadgen-replication");
    let out = dir.path().join("out");
    let (stdout, _) = loadgen(&[
        "replication",
        "--messages",
        "20000",
        "--latency-rate",
        "2000",
        "--latency-seconds",
        "1",
        "--failovers",
        "1",
        "--catch-up-bytes",
        "20000000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(stdout.contains("failover 1: broker"), "{stdout}");
    for file in ["replication.md", "throughput.svg", "latency.svg"] {
        assert!(out.join(file).exists(), "no {file}: {stdout}");
    }
    let report = json(&out.join("replication.json"));
    assert_eq!(
        report["throughput"].as_array().unwrap().len(),
        4,
        "{report:#}"
    );
    assert_eq!(report["latency"].as_array().unwrap().len(), 4, "{report:#}");
    assert_eq!(
        report["throughput"][3]["label"].as_str(),
        Some("R=3 acks=all write_caching"),
        "{report:#}"
    );
    for run in report["throughput"].as_array().unwrap() {
        assert!(run["msgs_per_sec"].as_f64().unwrap() > 0.0, "{run:#}");
    }
    assert!(report["consume"]["msgs_per_sec"].as_f64().unwrap() > 0.0);
    let gaps = report["failover"]["gaps_ms"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{report:#}");
    // The gap cannot be shorter than what was left of the killed leader's
    // 3 s lease: it was renewed every second.
    assert!(gaps[0].as_f64().unwrap() >= 2_000.0, "{report:#}");
    let catch_up = &report["catch_up"];
    let bytes = catch_up["bytes"].as_f64().unwrap();
    assert!(bytes >= 20_000_000.0, "{catch_up:#}");
    // Over plain TCP a follower's fetches are answered with sendfile only.
    assert_eq!(
        catch_up["leader_copied_bytes"].as_f64(),
        Some(0.0),
        "{catch_up:#}"
    );
    assert!(
        catch_up["leader_zero_copy_bytes"].as_f64().unwrap() >= bytes,
        "{catch_up:#}"
    );
}

/// `loadgen mirror` (issue 21, item 7) runs on two brokers of its own,
/// repeats the rate runs, and finds the copy complete at each load.
#[test]
fn mirror_figures_run_on_two_brokers_of_their_own() {
    let dir = TempDir::new("loadgen-mirror");
    let out = dir.path().join("out");
    let (stdout, _) = loadgen(&[
        "mirror",
        "--messages",
        "20000",
        "--rounds",
        "2",
        "--latency-seconds",
        "1",
        "--loads",
        "0.01",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(out.join("mirror.md").exists(), "no table: {stdout}");
    let report = json(&out.join("mirror.json"));
    let rates = report["rates"].as_array().unwrap();
    assert_eq!(rates.len(), 3, "{report:#}");
    assert_eq!(rates[1]["rounds_msgs_per_sec"].as_array().unwrap().len(), 2);
    // The copy's own span is inside the whole run's.
    let (copy, whole) = (
        rates[1]["msgs_per_sec"].as_f64().unwrap(),
        rates[2]["msgs_per_sec"].as_f64().unwrap(),
    );
    assert!(copy >= whole && whole > 0.0, "{report:#}");
    let latency = &report["latency"][0];
    assert!(latency["received"].as_u64().unwrap() > 0, "{report:#}");
    assert_eq!(latency["anomalies"].as_u64(), Some(0), "{report:#}");
}

/// `loadgen security` (issue 22, item 7) runs its two brokers, logs in on
/// both, and is allowed everything it does on the secured one by its
/// rules alone (its user is not a super user).
#[test]
fn security_figures_run_on_a_broker_with_and_one_without_access_control() {
    let dir = TempDir::new("loadgen-security");
    let out = dir.path().join("out");
    let (stdout, _) = loadgen(&[
        "security",
        "--messages",
        "20000",
        "--rounds",
        "2",
        "--rules",
        "50",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(out.join("security.md").exists(), "no table: {stdout}");
    let report = json(&out.join("security.json"));
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report:#}");
    for row in rows {
        assert_eq!(
            row["produce_rounds"].as_array().unwrap().len(),
            2,
            "{report:#}"
        );
        assert!(
            row["consume_msgs_per_sec"].as_f64().unwrap() > 0.0,
            "{report:#}"
        );
    }
    assert!(report["check_ns"].as_f64().unwrap() > 0.0, "{report:#}");
}

/// `loadgen formats` (issue 43, item 8) runs every experiment on its own
/// broker of two shards and reports each format's rows, each codec's, and
/// acks written for format 1, format 2 and format 2 numbered.
#[test]
fn format_figures_report_every_experiment_codec_and_producer() {
    let dir = TempDir::new("loadgen-formats");
    let out = dir.path().join("out");
    let (stdout, _) = loadgen(&[
        "formats",
        "--messages",
        "20000",
        "--codec-messages",
        "5000",
        "--rounds",
        "2",
        "--shards",
        "2",
        "--written-partitions",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(out.join("formats.txt").exists(), "no table: {stdout}");
    let report = json(&out.join("formats.json"));
    // 2 rounds × 2 formats × (batch 1, batch 50, consume).
    let formats = report["formats"].as_array().unwrap();
    assert_eq!(formats.len(), 12, "{report:#}");
    for row in formats {
        assert!(row["msgs_per_sec"].as_f64().unwrap() > 0.0, "{row:#}");
    }
    let stored: Vec<f64> = formats
        .iter()
        .filter(|r| r["experiment"] == "produce-batch-1")
        .map(|r| r["bytes_per_message"].as_f64().unwrap())
        .collect();
    // 200-byte messages: 9 bytes of the paper's header, or a batch's 61
    // and a record's 9 on format 2.
    assert!(
        stored.contains(&209.0) && stored.contains(&270.0),
        "{stored:?}"
    );
    let codecs: Vec<&str> = report["codecs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["codec"].as_str().unwrap())
        .collect();
    assert_eq!(codecs, ["none", "gzip", "snappy", "lz4", "zstd"]);
    // 2 rounds × 2 batch sizes × 3 producers, each of them measured.
    let written = report["idempotence"].as_array().unwrap();
    assert_eq!(written.len(), 12, "{report:#}");
    for (format, idempotence) in [(1, false), (2, false), (2, true)] {
        let rows = written
            .iter()
            .filter(|r| r["format"] == format && r["idempotence"] == idempotence)
            .count();
        assert_eq!(
            rows, 4,
            "format {format} idempotence {idempotence}: {report:#}"
        );
    }
    assert_eq!(report["written_partitions"].as_u64(), Some(3));
}
