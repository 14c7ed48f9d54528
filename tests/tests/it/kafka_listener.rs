//! Issue 44: Kafka's own clients against ringlog's Kafka listener
//! (`broker --kafka-listen`) — kcat (librdkafka), kafka-python and the Java
//! client 4.4 — on format-2 topics at byte offsets, standalone and on a
//! three-broker cluster with three copies; and what a broken client's
//! bytes do to the listener. The clients are installed by
//! `deploy/test-deps.sh` (kcat from Debian, Kafka's jars from Maven
//! Central) and kafka-python from PyPI into a virtualenv here.

use super::util::metric_reaching;
use harness::etcd::Etcd;
use harness::{Broker, BrokerOptions};
use protocol::client::{Client, OffsetSpec, TopicSettings};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub(crate) const KAFKA_LIBS: &str = "/tmp/ringlog-peers/kafka-4.4.0/libs";

fn kafka_options() -> BrokerOptions {
    BrokerOptions {
        metrics: true,
        args: vec!["--kafka-listen".into(), "127.0.0.1:0".into()],
        ..BrokerOptions::default()
    }
}

pub(crate) fn format_two(client: &Client, name: &str, partitions: u32, settings: TopicSettings) {
    client
        .create_topic(
            name,
            partitions,
            &TopicSettings {
                message_format: 2,
                ..settings
            },
        )
        .unwrap();
}

/// Runs kcat with `args` and `input` on its stdin, for at most 60 s.
pub(crate) fn kcat(args: &[&str], input: &str) -> Output {
    let mut child = Command::new("timeout")
        .arg("60")
        .arg("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat (installed by deploy/test-deps.sh: apt-get install kcat)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub(crate) fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The Kafka node that leads `topic`'s partition: its owning shard's.
fn leader_node(client: &Client, topic: &str, partition: u32) -> i32 {
    let metadata = client.metadata(&[topic]).unwrap();
    let placement = metadata.topics[0]
        .partitions
        .iter()
        .find(|p| p.partition == partition)
        .unwrap()
        .clone();
    placement.broker_id as i32 * 1024 + i32::from(placement.shard_id)
}

#[test]
fn kcat_lists_produces_and_consumes_at_byte_offsets_with_every_codec() {
    let broker = Broker::start(kafka_options());
    let client = broker.client();
    assert_eq!(broker.kafka.len(), 2, "one Kafka port per shard");
    let bootstrap = broker.kafka[0].as_str();
    format_two(&client, "t", 1, TopicSettings::default());
    let node = leader_node(&client, "t", 0);

    let listed = kcat(&["-b", bootstrap, "-L"], "");
    let (out, err) = text(&listed);
    assert!(listed.status.success(), "{out}{err}");
    assert!(out.contains("2 brokers:"), "{out}");
    assert!(out.contains("topic \"t\" with 1 partitions:"), "{out}");
    assert!(
        out.contains(&format!(
            "partition 0, leader {node}, replicas: {node}, isrs: {node}"
        )),
        "{out}"
    );

    // A linger long enough that the three lines are one batch however
    // busy the machine is.
    let linger = ["-X", "queue.buffering.max.ms=200"];
    let produce = [
        "-b", bootstrap, "-P", "-t", "t", "-p", "0", linger[0], linger[1],
    ];
    let produced = kcat(&produce, "a\nb\nc\n");
    assert!(produced.status.success(), "{:?}", text(&produced));
    let read = kcat(
        &[
            "-b",
            bootstrap,
            "-C",
            "-t",
            "t",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %s\n",
        ],
        "",
    );
    let (out, err) = text(&read);
    // One uncompressed batch of three one-byte records: 61 bytes of batch
    // header and 8 of each record; the next offset is the byte after it.
    assert_eq!(out, "0 a\n1 b\n2 c\n", "{err}");
    assert!(
        err.contains("Reached end of topic t [0] at offset 85"),
        "{err}"
    );

    // A batch per codec, each after the last one's bytes.
    for codec in ["zstd", "lz4", "gzip", "snappy"] {
        let line = format!("{codec}-1\n{codec}-2\n");
        let produced = kcat(
            &["-b", bootstrap, "-P", "-t", "t", "-p", "0", "-z", codec],
            &line,
        );
        assert!(produced.status.success(), "{codec}: {:?}", text(&produced));
    }
    let read = kcat(
        &[
            "-b",
            bootstrap,
            "-C",
            "-t",
            "t",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %s\n",
        ],
        "",
    );
    let (out, err) = text(&read);
    let records: Vec<(u64, &str)> = out
        .lines()
        .map(|l| {
            let (offset, value) = l.split_once(' ').unwrap();
            (offset.parse().unwrap(), value)
        })
        .collect();
    let values: Vec<&str> = records.iter().map(|r| r.1).collect();
    assert_eq!(
        values,
        [
            "a", "b", "c", "zstd-1", "zstd-2", "lz4-1", "lz4-2", "gzip-1", "gzip-2", "snappy-1",
            "snappy-2"
        ],
        "{err}"
    );
    assert_eq!(
        records[3].0, 85,
        "the second batch starts at the first's end"
    );
    assert!(records.windows(2).all(|w| w[0].0 < w[1].0), "{out}");
    let end = client
        .list_offsets("t", 0, OffsetSpec::Latest, 0)
        .unwrap()
        .1
        .end_offset;
    assert!(
        err.contains(&format!("at offset {end}")),
        "the end is the log's byte end {end}: {err}"
    );

    // Inside a batch: from the second record of the first.
    let read = kcat(
        &[
            "-b", bootstrap, "-C", "-t", "t", "-p", "0", "-o", "1", "-c", "2", "-f", "%o %s\n",
        ],
        "",
    );
    assert_eq!(text(&read).0, "1 b\n2 c\n", "{:?}", text(&read));
    // Kafka fetches go out with sendfile (published a moment later).
    assert!(metric_reaching(&broker, "ringlog_fetch_zero_copy_bytes_total", 1) > 0);

    // ringlog's own consumer reads what kcat produced.
    let native = Command::new(harness::binary("ringlog"))
        .args([
            "--brokers",
            &broker.address(),
            "consume",
            "t",
            "--partition",
            "0",
        ])
        .args(["--from", "earliest", "--count", "11", "--print-offsets"])
        .output()
        .unwrap();
    let (out, err) = text(&native);
    assert!(native.status.success(), "{err}");
    assert!(
        out.starts_with("0:0\ta\n0:1\tb\n0:2\tc\n0:85\tzstd-1\n"),
        "{out}"
    );

    // A format-1 topic stores the paper's messages, not Kafka's batches.
    client
        .create_topic("old", 1, &TopicSettings::default())
        .unwrap();
    let refused = kcat(&["-b", bootstrap, "-P", "-t", "old", "-p", "0"], "x\n");
    let (out, err) = text(&refused);
    assert!(!refused.status.success(), "{out}{err}");
    assert!(
        err.contains("Message format on broker does not support request"),
        "{err}"
    );
}

/// One request frame: size, api, version, correlation id, null client id,
/// body.
pub(crate) fn frame(api: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((10 + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&api.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&correlation.to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out.extend_from_slice(body);
    out
}

pub(crate) fn connect(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// The (api, min, max) list of an ApiVersions v0 answer on `stream`.
pub(crate) fn api_versions(stream: &mut TcpStream) -> Vec<(i16, i16, i16)> {
    stream.write_all(&frame(18, 0, 7, &[])).unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).unwrap();
    let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(&answer[..4], &7i32.to_be_bytes(), "the correlation id");
    assert_eq!(&answer[4..6], &[0, 0], "no error");
    let count = i32::from_be_bytes(answer[6..10].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| {
            let at = 10 + i * 6;
            let v = |o: usize| i16::from_be_bytes([answer[at + o], answer[at + o + 1]]);
            (v(0), v(2), v(4))
        })
        .collect()
}

/// True once the broker closed `stream` (a read sees its end).
fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0))
}

#[test]
fn a_broken_kafka_client_is_disconnected_and_the_listener_goes_on() {
    let broker = Broker::start(kafka_options());
    let address = broker.kafka[1].as_str();
    let mut stream = connect(address);
    let listed = api_versions(&mut stream);
    assert!(listed.contains(&(0, 3, 8)), "Produce 3–8: {listed:?}");
    assert!(listed.contains(&(1, 4, 11)), "Fetch 4–11: {listed:?}");
    // A version ApiVersions did not offer: closed, as Kafka does.
    stream.write_all(&frame(0, 99, 8, &[])).unwrap();
    assert!(
        closed(&mut stream),
        "an unserved version closes the connection"
    );
    // A frame larger than max_request_bytes: closed before it is read.
    let mut stream = connect(address);
    stream.write_all(&i32::MAX.to_be_bytes()).unwrap();
    stream.write_all(&[0, 3, 0, 8, 0, 0, 0, 1]).unwrap();
    assert!(closed(&mut stream));
    // A Metadata body claiming a million topics in four bytes.
    let mut stream = connect(address);
    stream
        .write_all(&frame(3, 8, 9, &1_000_000i32.to_be_bytes()))
        .unwrap();
    assert!(closed(&mut stream));
    // A body cut short (Produce without its topics).
    let mut stream = connect(address);
    stream
        .write_all(&frame(0, 8, 10, &[0xff, 0xff, 0, 1]))
        .unwrap();
    assert!(closed(&mut stream));
    // An unknown api.
    let mut stream = connect(address);
    stream.write_all(&frame(999, 0, 11, &[])).unwrap();
    assert!(closed(&mut stream));
    // The listener goes on, and the broker said why each closed.
    let mut stream = connect(address);
    assert!(!api_versions(&mut stream).is_empty());
    let log = broker.log();
    assert!(log.contains("kafka: closing a connection"), "{log}");
}

#[test]
fn kafka_python_produces_and_consumes_with_keys_headers_and_times() {
    let broker = Broker::start(kafka_options());
    let client = broker.client();
    format_two(&client, "py", 2, TopicSettings::default());
    let (out, err) = kafka_python_check(&broker.kafka[0], "py", 2000, &[]);
    assert!(out.contains("by_time 0 first_offset 0\n"), "{out}{err}");
}

/// Runs tests/kafka/kafka_python_check.py (with `env`) for `count` records
/// of `topic`, checks that each was produced and read back, and returns
/// what it printed.
fn kafka_python_check(
    bootstrap: &str,
    topic: &str,
    count: u32,
    env: &[(&str, &Path)],
) -> (String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/kafka_python_check.py");
    let output = harness::python::command_with("kafka-python", &["kafka-python==3.0.12"])
        .arg(script)
        .args([bootstrap, topic, &count.to_string()])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    assert!(out.contains(&format!("produced {count}\n")), "{out}{err}");
    assert!(
        out.contains(&format!("consumed {count} wrong 0\n")),
        "{out}{err}"
    );
    assert!(out.contains("positions_at_end True\n"), "{out}{err}");
    (out, err)
}

#[test]
fn kafka_clients_speak_tls_and_the_broker_asks_for_their_certificates() {
    let dir = harness::TempDir::new("kafka-tls");
    let files = harness::tls::make_certificates(&dir.path().join("certs"));
    let broker = Broker::start(BrokerOptions {
        config_toml: files.broker_toml(true),
        ..kafka_options()
    });
    let tls = protocol::client::TlsConfig::new(&files.ca)
        .and_then(|t| t.with_client_certificate(&files.client_cert, &files.client_key))
        .unwrap();
    let config = protocol::client::ClientConfig {
        tls: Some(tls),
        ..protocol::client::ClientConfig::default()
    };
    let client = Client::with_config(&broker.address(), config).unwrap();
    format_two(&client, "tls", 2, TopicSettings::default());
    let bootstrap = broker.kafka[0].clone();
    let with = |cert: &Path, key: &Path, rest: &[&str]| -> Output {
        let mut args: Vec<String> = ["-b", &bootstrap, "-X", "security.protocol=ssl"]
            .map(String::from)
            .to_vec();
        for (name, path) in [
            ("ssl.ca.location", files.ca.as_path()),
            ("ssl.certificate.location", cert),
            ("ssl.key.location", key),
        ] {
            args.push("-X".into());
            args.push(format!("{name}={}", path.display()));
        }
        args.extend(rest.iter().map(|a| a.to_string()));
        kcat_owned(&args, "a\nb\nc\n")
    };
    // kcat (librdkafka) with the client certificate: list, produce, read.
    let (cert, key) = (files.client_cert.as_path(), files.client_key.as_path());
    let listed = with(cert, key, &["-L", "-t", "tls"]);
    let (out, err) = text(&listed);
    assert!(
        out.contains("topic \"tls\" with 2 partitions"),
        "{out}{err}"
    );
    let produced = with(cert, key, &["-P", "-t", "tls", "-p", "0"]);
    assert!(produced.status.success(), "{:?}", text(&produced));
    let read = ["-C", "-t", "tls", "-p", "0", "-o", "beginning", "-e"];
    let consumed = with(cert, key, &[&read[..], &["-f", "%s\n"]].concat());
    assert_eq!(text(&consumed).0, "a\nb\nc\n", "{:?}", text(&consumed));
    // A certificate of a CA the broker does not trust: no answer but the
    // failed handshake.
    let (cert, key) = (
        files.other_client_cert.as_path(),
        files.other_client_key.as_path(),
    );
    let refused = with(cert, key, &["-L", "-m", "3"]);
    let (out, err) = text(&refused);
    assert!(!refused.status.success(), "{out}{err}");
    assert!(!out.contains("tls"), "{out}{err}");
    // Plain text to the TLS listener: refused too.
    let plain = kcat(&["-b", &bootstrap, "-L", "-m", "3"], "");
    assert!(!plain.status.success(), "{:?}", text(&plain));

    // kafka-python over TLS with the client certificate.
    format_two(&client, "tls-py", 2, TopicSettings::default());
    let env = [
        ("KAFKA_SSL_CA", files.ca.as_path()),
        ("KAFKA_SSL_CERT", files.client_cert.as_path()),
        ("KAFKA_SSL_KEY", files.client_key.as_path()),
    ];
    kafka_python_check(&bootstrap, "tls-py", 500, &env);
}

#[test]
fn a_log_append_time_topic_answers_a_produce_with_the_time_it_stamped() {
    let broker = Broker::start(kafka_options());
    let client = broker.client();
    let settings = TopicSettings {
        timestamp_type: 2,
        ..TopicSettings::default()
    };
    format_two(&client, "stamped", 1, settings);
    // kafka-python: a record sent with an old time of its own; the answer
    // carries the broker's time, and the stored record that same time.
    let script = r#"
import sys, time
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
before = int(time.time() * 1000)
producer = KafkaProducer(bootstrap_servers=sys.argv[1], acks="all")
sent = producer.send("stamped", b"v", partition=0, timestamp_ms=1000).get(timeout=30)
after = int(time.time() * 1000)
print("answered_in_window", before - 5 <= sent.timestamp <= after + 5)
consumer = KafkaConsumer(bootstrap_servers=sys.argv[1], consumer_timeout_ms=3000)
consumer.assign([TopicPartition("stamped", 0)])
consumer.seek_to_beginning()
record = next(iter(consumer))
print("stored_same", record.timestamp == sent.timestamp, "type", record.timestamp_type)
"#;
    let output = harness::python::command_with("kafka-python", &["kafka-python==3.0.12"])
        .args(["-c", script, &broker.kafka[0]])
        .output()
        .unwrap();
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    assert!(out.contains("answered_in_window True\n"), "{out}{err}");
    // timestamp_type 1: LogAppendTime.
    assert!(out.contains("stored_same True type 1\n"), "{out}{err}");
}

/// Runs tests/kafka/JavaClients.java against `bootstrap` and checks what
/// it found.
fn java_clients(bootstrap: &str, topic: &str, count: u32) {
    java_clients_as(bootstrap, topic, count, None);
}

/// [`java_clients`] logged in as `(user, password)` with SCRAM-SHA-256.
fn java_clients_as(bootstrap: &str, topic: &str, count: u32, login: Option<(&str, &str)>) {
    assert!(
        Path::new(KAFKA_LIBS).join("kafka-clients-4.4.0.jar").exists(),
        "Kafka 4.4's jars are not in {KAFKA_LIBS}: run `bash deploy/test-deps.sh` (the README's test command does)"
    );
    let output = Command::new("timeout")
        .arg("180")
        .arg("java")
        .arg("-cp")
        .arg(format!("{KAFKA_LIBS}/*"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/JavaClients.java"))
        .args([bootstrap, topic, &count.to_string()])
        .args(
            login
                .map(|(user, password)| [user, password])
                .into_iter()
                .flatten(),
        )
        .output()
        .expect("java (installed by deploy/test-deps.sh)");
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    assert!(
        out.contains(&format!("produced {count} partitions ")),
        "{out}{err}"
    );
    assert!(
        out.contains(&format!(
            "consumed {count} out_of_order 0 wrong_offset 0 bad_header 0\n"
        )),
        "{out}{err}"
    );
    assert!(out.contains("positions_at_end true\n"), "{out}{err}");
    // A seek into a batch starts at that record.
    let seek = out.lines().find(|l| l.starts_with("seek ")).unwrap();
    let words: Vec<&str> = seek.split(' ').collect();
    assert_eq!(words[1], words[3], "{seek}");
    assert!(out.contains("by_time 0 first_offset 0\n"), "{out}{err}");
    // AdminClient: CreateTopics (format 2, Kafka's configs), a second
    // create, a config ringlog has not, DeleteTopics.
    assert!(
        out.contains(&format!("admin created {topic}-admin partitions 3\n")),
        "{out}{err}"
    );
    assert!(
        out.contains("admin again TopicExistsException"),
        "{out}{err}"
    );
    // A consumer whose fetch maximum (100 bytes) is below a batch's size
    // gets the first batch whole and reads everything (KIP-74).
    let small = out
        .lines()
        .find_map(|l| l.strip_prefix("small_fetch read "))
        .unwrap_or_else(|| panic!("{out}{err}"));
    let words: Vec<&str> = small.split(' ').collect();
    assert_eq!(words[0], words[2], "{out}{err}");
    assert!(words[2].parse::<u32>().unwrap() > 0, "{out}{err}");
    assert_eq!(&words[3..], ["failure", "none"], "{out}{err}");
    // Metadata v10+ carries the topic's id, and v12 finds the topic by it.
    assert!(out.contains("admin topic id set\n"), "{out}{err}");
    assert!(
        out.contains(&format!("admin by id {topic}-admin\n")),
        "{out}{err}"
    );
    // DescribeConfigs: the topic's own retention, the fixed policy.
    assert!(
        out.contains("admin config retention.ms 3600000 DYNAMIC_TOPIC_CONFIG cleanup.policy delete DEFAULT_CONFIG\n"),
        "{out}{err}"
    );
    // CreatePartitions: raised, never lowered.
    assert!(
        out.contains(&format!("admin raised {topic}-admin partitions 5\n")),
        "{out}{err}"
    );
    assert!(
        out.contains("admin lower InvalidPartitionsException"),
        "{out}{err}"
    );
    assert!(
        out.contains("admin compact InvalidConfigurationException: cleanup.policy=\"compact\" is not supported by ringlog"),
        "{out}{err}"
    );
    assert!(
        out.contains(&format!("admin deleted {topic}-admin listed false\n")),
        "{out}{err}"
    );
}

/// Runs the CLI as `admin`.
fn ringlog_as_admin(broker: &Broker, admin: &Path, args: &[&str]) {
    let output = Command::new(harness::binary("ringlog"))
        .args([
            "--brokers",
            &broker.address(),
            "--user",
            "admin",
            "--password-file",
        ])
        .arg(admin)
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
}

/// kcat's arguments to log in to `bootstrap` as `user`, then `rest`.
fn sasl(bootstrap: &str, user: &str, password: &str, rest: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-b".into(),
        bootstrap.into(),
        "-X".into(),
        "security.protocol=SASL_PLAINTEXT".into(),
        "-X".into(),
        "sasl.mechanisms=SCRAM-SHA-256".into(),
        "-X".into(),
        format!("sasl.username={user}"),
        "-X".into(),
        format!("sasl.password={password}"),
    ];
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

fn kcat_owned(args: &[String], input: &str) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    kcat(&args, input)
}

#[test]
fn kafka_clients_log_in_with_scram_and_meet_the_same_rights() {
    let dir = harness::TempDir::new("kafka-scram");
    // The first user written while the broker is stopped, as before any runs.
    let mut broker = Broker::start(BrokerOptions {
        config_toml: super::security::SECURE.into(),
        ..kafka_options()
    });
    broker.stop();
    let admin = super::security::password_file(dir.path(), "admin", "admin-secret");
    let added = Command::new(harness::binary("ringlog"))
        .args(["users", "add", "admin", "--password-file"])
        .arg(&admin)
        .arg("--data-dir")
        .arg(broker.data_dir())
        .output()
        .unwrap();
    assert!(added.status.success(), "{:?}", text(&added));
    broker.restart();
    let bob = super::security::password_file(dir.path(), "bob", "bob-secret");
    let bob = bob.to_str().unwrap();
    ringlog_as_admin(
        &broker,
        &admin,
        &["users", "add", "bob", "--new-password-file", bob],
    );
    let create = [
        "topic",
        "create",
        "sec",
        "--partitions",
        "2",
        "--message-format",
        "2",
    ];
    ringlog_as_admin(&broker, &admin, &create);
    let bootstrap = broker.kafka[0].clone();
    let produce = sasl(
        &bootstrap,
        "admin",
        "admin-secret",
        &["-P", "-t", "sec", "-p", "0"],
    );
    let produced = kcat_owned(&produce, "x\ny\n");
    assert!(produced.status.success(), "{:?}", text(&produced));
    let consume = [
        "-C",
        "-t",
        "sec",
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%s\n",
    ];
    let consume = sasl(&bootstrap, "admin", "admin-secret", &consume);
    // (One batch or two, as librdkafka's linger falls.)
    assert_eq!(text(&kcat_owned(&consume, "")).0, "x\ny\n");

    // A wrong password: refused after the delay, counted, logged.
    let refused = kcat_owned(&sasl(&bootstrap, "admin", "guess", &["-L", "-m", "3"]), "");
    let (_, err) = text(&refused);
    assert!(!refused.status.success());
    assert!(err.contains("wrong user name or password"), "{err}");
    // No login at all: the connection is closed at its first request.
    let refused = kcat(&["-b", &bootstrap, "-L", "-m", "3"], "");
    assert!(!refused.status.success());
    let log = broker.log();
    assert!(log.contains("login failed for user \"admin\""), "{log}");
    assert!(
        log.contains("kafka: closing a connection: this broker needs a login"),
        "{log}"
    );
    // bob is in, but holds no right on the topic.
    let denied = kcat_owned(
        &sasl(
            &bootstrap,
            "bob",
            "bob-secret",
            &["-P", "-t", "sec", "-p", "0"],
        ),
        "z\n",
    );
    let (out, err) = text(&denied);
    assert!(!denied.status.success(), "{out}{err}");
    assert!(err.contains("Topic authorization failed"), "{err}");

    // The Java client logged in: produce, consume, admin (a topic of its
    // own: it reads its numbered records from the start).
    let create = [
        "topic",
        "create",
        "secj",
        "--partitions",
        "2",
        "--message-format",
        "2",
    ];
    ringlog_as_admin(&broker, &admin, &create);
    java_clients_as(&bootstrap, "secj", 2_000, Some(("admin", "admin-secret")));
}

#[test]
fn the_java_client_produces_idempotently_and_consumes_in_order() {
    let broker = Broker::start(kafka_options());
    let client = broker.client();
    format_two(&client, "jv", 2, TopicSettings::default());
    java_clients(&broker.kafka[0], "jv", 10_000);
    // Published by the shards a moment later.
    assert!(metric_reaching(&broker, "ringlog_fetch_zero_copy_bytes_total", 1) > 0);
}

#[test]
fn the_java_client_on_a_three_broker_cluster_with_three_copies() {
    let etcd = Etcd::start();
    let options = (1..=3)
        .map(|id| BrokerOptions {
            args: vec!["--kafka-listen".into(), "127.0.0.1:0".into()],
            ..super::replication::options(&etcd, "kafka3", id)
        })
        .collect();
    let brokers = super::replication::cluster_of(options);
    let client = brokers[0].client();
    format_two(&client, "r3", 2, super::replication::replicated(3, 2));
    let listed = kcat(&["-b", &brokers[1].kafka[0], "-L", "-t", "r3"], "");
    let (out, err) = text(&listed);
    assert!(out.contains("3 brokers:"), "{out}{err}");
    // Every partition names three copies, all in sync.
    let copies = out.lines().filter(|l| l.contains("partition ")).count();
    assert_eq!(copies, 2, "{out}");
    for line in out.lines().filter(|l| l.contains("partition ")) {
        let replicas = line.split("replicas: ").nth(1).unwrap();
        let (replicas, isrs) = replicas.split_once(", isrs: ").unwrap();
        assert_eq!(replicas.split(',').count(), 3, "{line}");
        assert_eq!(isrs.split(',').count(), 3, "{line}");
    }
    // acks=all (the Java client's default) waits for the copies.
    java_clients(&brokers[2].kafka[0], "r3", 5_000);
    // kafka-python too (acks=all, idempotent), from another broker.
    format_two(&client, "r3-py", 2, super::replication::replicated(3, 2));
    kafka_python_check(&brokers[1].kafka[0], "r3-py", 2000, &[]);
}
