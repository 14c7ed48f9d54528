//! Issue 8, item 21: TLS for client connections, with a real handshake from
//! the Rust client and the CLI, client certificates, and every way in
//! without the right credentials refused with an error (never a hang).

use super::util::{metric, metric_reaching, read_all, scrape};
use harness::tls::{make_certificates, TlsFiles};
use harness::{binary, check_numbered_payload, numbered_payload, Broker, BrokerOptions};
use protocol::client::{
    AckMode, Client, ClientConfig, Producer, ProducerConfig, Start, TlsConfig, TopicConsumer,
    TopicConsumerConfig, TopicSettings,
};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn cert_dir(label: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    std::env::temp_dir().join(format!("ringlog-tls-{}-{label}-{n}", std::process::id()))
}

fn tls_broker(files: &TlsFiles, client_certificates: bool) -> Broker {
    Broker::start(BrokerOptions {
        config_toml: format!(
            "{}handshake_timeout_ms = 500\n",
            files.broker_toml(client_certificates)
        ),
        metrics: true,
        ..BrokerOptions::default()
    })
}

fn config(tls: TlsConfig) -> ClientConfig {
    ClientConfig {
        tls: Some(tls),
        connect_timeout: Duration::from_secs(2),
        retries: 0,
        ..ClientConfig::default()
    }
}

fn trusted(files: &TlsFiles) -> TlsConfig {
    TlsConfig::new(&files.ca)
        .and_then(|t| t.with_client_certificate(&files.client_cert, &files.client_key))
        .unwrap_or_else(|e| panic!("client TLS config: {e}"))
}

#[test]
fn a_tls_broker_serves_producers_and_consumers_of_every_shard_with_client_certificates() {
    let files = make_certificates(&cert_dir("serve"));
    let broker = tls_broker(&files, true);
    let client = Client::with_config(&broker.address(), config(trusted(&files)))
        .unwrap_or_else(|e| panic!("TLS client: {e}"));
    client
        .create_topic("secret", 4, &TopicSettings::default())
        .unwrap_or_else(|e| panic!("create over TLS: {e}"));

    // 20,000 numbered messages over 4 partitions on 2 shards, acks flushed,
    // through the producer (its acknowledgements read on their own thread,
    // through the same TLS session as its writes).
    let mut producer = Producer::new(
        &client,
        "secret",
        ProducerConfig {
            acks: AckMode::Flushed,
            batch_messages: 100,
            ..ProducerConfig::default()
        },
    )
    .unwrap_or_else(|e| panic!("producer: {e}"));
    const COUNT: u64 = 20_000;
    for i in 0..COUNT {
        producer
            .send_to((i % 4) as u32, None, &numbered_payload(i, 200))
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    producer
        .flush()
        .unwrap_or_else(|e| panic!("flush over TLS: {e}"));

    // Read back by a topic consumer (one TLS connection per shard).
    let mut consumer = TopicConsumer::new(
        &client,
        "secret",
        Start::Earliest,
        TopicConsumerConfig::default(),
    )
    .unwrap_or_else(|e| panic!("topic consumer: {e}"));
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (seen.len() as u64) < COUNT {
        assert!(Instant::now() < deadline, "read {} of {COUNT}", seen.len());
        for message in consumer.poll(Duration::from_millis(500)).unwrap() {
            let index = check_numbered_payload(&message.value, 200);
            assert_eq!(index % 4, u64::from(message.partition));
            assert!(
                seen.insert(index, message.offset).is_none(),
                "{index} twice"
            );
        }
    }
    consumer.close();

    // Large messages: a fetch of several 1 MiB pieces, each read and
    // encrypted (no sendfile under TLS).
    client
        .create_topic("big", 1, &TopicSettings::default())
        .unwrap_or_else(|e| panic!("create: {e}"));
    let mut big = Producer::new(
        &client,
        "big",
        ProducerConfig {
            acks: AckMode::Flushed,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    for i in 0..24u64 {
        big.send_to(0, None, &numbered_payload(i, 300_000)).unwrap();
    }
    big.flush().unwrap();
    let messages = read_all(&client, "big", 0, 0);
    assert_eq!(messages.len(), 24);
    for (i, message) in messages.iter().enumerate() {
        assert_eq!(check_numbered_payload(&message.value, 300_000), i as u64);
    }
    let copied = metric_reaching(&broker, "ringlog_fetch_copied_bytes_total", 24 * 300_000);
    assert!(copied >= 24 * 300_000, "copied {copied}");
    let endpoint = broker
        .metrics
        .as_deref()
        .unwrap_or_else(|| panic!("metrics"));
    let zero_copy = metric(&scrape(endpoint), "ringlog_fetch_zero_copy_bytes_total");
    assert_eq!(zero_copy, 0, "no sendfile under TLS");
}

#[test]
fn clients_without_the_right_credentials_are_refused_with_an_error_not_a_hang() {
    let files = make_certificates(&cert_dir("refuse"));
    let broker = tls_broker(&files, true);
    let address = broker.address();
    let refused = |label: &str, config: ClientConfig| {
        let started = Instant::now();
        let result = Client::with_config(&address, config).and_then(|c| c.metadata(&[]));
        let error = match result {
            Ok(_) => panic!("{label}: connected"),
            Err(error) => error.to_string(),
        };
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{label}: took {:?}",
            started.elapsed()
        );
        error
    };

    // Plain TCP to a TLS broker.
    let plain = refused(
        "plain",
        ClientConfig {
            connect_timeout: Duration::from_secs(2),
            retries: 0,
            ..ClientConfig::default()
        },
    );
    assert!(plain.contains("does it require TLS?"), "{plain}");
    // TLS, but no client certificate.
    let anonymous = refused(
        "no client certificate",
        config(TlsConfig::new(&files.ca).unwrap()),
    );
    assert!(
        anonymous.contains("the broker requires a client certificate"),
        "{anonymous}"
    );
    // A client certificate from a CA the broker does not trust.
    let intruder = TlsConfig::new(&files.ca)
        .and_then(|t| t.with_client_certificate(&files.other_client_cert, &files.other_client_key))
        .unwrap();
    let intruder = refused("untrusted client certificate", config(intruder));
    assert!(
        intruder.contains("the broker does not trust this client's certificate"),
        "{intruder}"
    );
    // A client that does not trust the broker's CA.
    let wary = TlsConfig::new(&files.other_ca)
        .and_then(|t| t.with_client_certificate(&files.client_cert, &files.client_key))
        .unwrap();
    let unknown = refused("untrusted broker", config(wary));
    assert!(
        unknown.contains("invalid peer certificate: UnknownIssuer"),
        "{unknown}"
    );
    // The broker's certificate is for 127.0.0.1 and localhost, not this name.
    let misnamed = trusted(&files).with_server_name("elsewhere.test").unwrap();
    let wrong_name = refused("wrong server name", config(misnamed));
    assert!(
        wrong_name.contains("not valid for name \"elsewhere.test\""),
        "{wrong_name}"
    );

    // A connection that never starts its TLS handshake is closed at the
    // handshake deadline (500 ms here), not held.
    let mut idle = std::net::TcpStream::connect(&address).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    let n = idle.read(&mut byte).unwrap_or(0);
    assert_eq!(n, 0, "closed without a byte");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed after {:?}",
        started.elapsed()
    );
    let failures = metric_reaching(&broker, "ringlog_tls_handshake_failures_total", 5);
    assert!(failures >= 5, "{failures} handshake failures counted");

    // And the broker still serves a client with the right credentials.
    let client = Client::with_config(&address, config(trusted(&files))).unwrap();
    client.metadata(&[]).unwrap();
}

#[test]
fn the_cli_speaks_tls_and_says_what_is_missing() {
    let files = make_certificates(&cert_dir("cli"));
    let broker = tls_broker(&files, true);
    let ringlog = |args: &[&str], input: &str| {
        let mut child = Command::new(binary("ringlog"))
            .env("RINGLOG_BROKERS", broker.address())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(mut stdin) = child.stdin.take() {
            std::io::Write::write_all(&mut stdin, input.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    };
    let ca = files.ca.display().to_string();
    let cert = files.client_cert.display().to_string();
    let key = files.client_key.display().to_string();
    let tls = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let with =
        |rest: &[&str]| -> Vec<String> { tls.iter().chain(rest).map(|s| s.to_string()).collect() };
    let run = |args: Vec<String>, input: &str| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        ringlog(&refs, input)
    };
    let out = run(
        with(&["topic", "create", "cli-tls", "--partitions", "1"]),
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(with(&["produce", "cli-tls"]), "one\ntwo\nthree\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(with(&["consume", "cli-tls", "--count", "3"]), "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo\nthree\n");

    // Without TLS flags: an error, not a hang and not a garbled answer.
    let out = ringlog(&["topic", "list"], "");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("ringlog: error:"), "{stderr}");
    // A client key without its certificate is a usage error.
    let out = ringlog(&["--tls-ca", &ca, "--tls-key", &key, "topic", "list"], "");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tls-cert and --tls-key go together"),
        "{stderr}"
    );
}

#[test]
fn a_broker_with_bad_tls_files_refuses_to_start_with_one_line() {
    let files = make_certificates(&cert_dir("bad"));
    let data = cert_dir("bad-data");
    let start = |args: &[&str]| {
        let out = Command::new(binary("broker"))
            .args([
                "--data-dir",
                &data.display().to_string(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cert = files.server_cert.display().to_string();
    let key = files.server_key.display().to_string();
    let stderr = start(&["--tls-cert", &cert]);
    assert!(
        stderr.contains("tls_cert and tls_key go together"),
        "{stderr}"
    );
    let stderr = start(&["--tls-cert", &cert, "--tls-key", "/nonexistent/broker.key"]);
    assert!(stderr.contains("/nonexistent/broker.key"), "{stderr}");
    // A key that is not the certificate's.
    let other_key = files.client_key.display().to_string();
    let stderr = start(&["--tls-cert", &cert, "--tls-key", &other_key]);
    assert!(stderr.contains("broker: error:"), "{stderr}");
    let _ = key;
}

#[test]
fn a_tls_broker_past_max_connections_closes_new_connections_at_once() {
    // One connection per shard; a refused one must not hold a descriptor
    // through a TLS handshake (that is what the limit protects).
    let files = make_certificates(&cert_dir("limit"));
    let broker = Broker::start(BrokerOptions {
        config_toml: format!(
            "{}handshake_timeout_ms = 5000\nmax_connections = 2\n",
            files.broker_toml(false)
        ),
        metrics: true,
        ..BrokerOptions::default()
    });
    let address = broker.address();
    // Both land on shard 0, whose accept loop counts the first before it
    // accepts the second.
    let _held = std::net::TcpStream::connect(&address).unwrap();
    let mut refused = std::net::TcpStream::connect(&address).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(4)))
        .unwrap();
    let mut byte = [0u8; 1];
    // Closed without a byte, before the 5 s handshake deadline could.
    assert_eq!(refused.read(&mut byte).unwrap_or(1), 0, "closed, not held");
    let count = metric_reaching(&broker, "ringlog_connections_refused_total", 1);
    assert_eq!(count, 1);
}

/// Issue 20 with TLS: a cluster whose listeners speak TLS (client
/// certificates required) replicates over TLS too — each follower connects
/// to its leader in TLS, checks the leader's certificate against
/// `tls_peer_ca` (here its default, `tls_client_ca`) and presents its own —
/// so acks=all with two in-sync copies is answered and the copies are
/// byte-identical. A cluster broker with TLS but no CA to check its leaders
/// with is refused at start, saying which key to set.
#[test]
fn r20_followers_fetch_from_their_leaders_over_tls() {
    use super::replication::{options, replicated, wait_identical, WAIT};
    let etcd = harness::etcd::Etcd::start();
    let files = make_certificates(&cert_dir("peers"));
    let brokers: Vec<Broker> = (1..=2)
        .map(|id| {
            let mut o = options(&etcd, "tls-peers", id);
            o.config_toml.push_str(&files.broker_toml(true));
            o.metrics = true;
            Broker::start(o)
        })
        .collect();
    let client = Client::with_config(&brokers[0].address(), config(trusted(&files))).unwrap();
    harness::eventually("both brokers live", WAIT, || {
        let n = client
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        (n == 2).then_some(()).ok_or(format!("{n}"))
    });
    client.create_topic("sealed", 2, &replicated(2, 2)).unwrap();
    let mut producer = Producer::new(
        &client,
        "sealed",
        ProducerConfig {
            acks: AckMode::All,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    for i in 0..2_000u64 {
        producer
            .send_to((i % 2) as u32, None, &numbered_payload(i, 100))
            .unwrap();
    }
    producer.flush().unwrap();
    assert_eq!(producer.acked_messages(), 2_000);
    for p in 0..2 {
        wait_identical(&[&brokers[0], &brokers[1]], "sealed", p);
    }
    // Both brokers lead one partition and follow the other, over TLS: the
    // replicated bytes went through the sessions, not sendfile.
    for broker in &brokers {
        assert!(
            metric_reaching(broker, "ringlog_replica_fetch_bytes_total", 100_000) >= 100_000,
            "{}",
            broker.log()
        );
    }

    // No CA for the leaders' certificates: refused at start.
    let dir = harness::TempDir::new("tls-no-peer-ca");
    let toml = dir.path().join("broker.toml");
    std::fs::write(
        &toml,
        format!(
            "etcd = [\"http://127.0.0.1:1\"]\n{}",
            files.broker_toml(false)
        ),
    )
    .unwrap();
    let output = Command::new(binary("broker"))
        .arg("--config")
        .arg(&toml)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("tls_peer_ca"), "{stderr}");
}

/// Issue 25, item 4: a group member takes its client's configuration (here
/// TLS with a client certificate, which a plain `subscribe` cannot speak),
/// and a subscribed topic that does not exist is an outage saying so, not
/// an idle member; once the topic is created the member reads it.
#[test]
fn a_group_member_speaks_tls_through_its_client_and_says_when_its_topic_is_missing() {
    use protocol::client::{GroupConfig, GroupConsumer};
    let etcd = harness::etcd::Etcd::start();
    let files = make_certificates(&cert_dir("group"));
    let mut options = super::replication::options(&etcd, "tls-group", 1);
    options.config_toml.push_str(&files.broker_toml(true));
    let broker = Broker::start(options);
    let plain =
        GroupConsumer::subscribe(&broker.address(), "g", &["later"], GroupConfig::default());
    assert!(plain.is_err(), "plain TCP to a TLS broker");
    let client = Client::with_config(&broker.address(), config(trusted(&files))).unwrap();
    let mut member = GroupConsumer::subscribe_with(
        &client,
        "g",
        &["later"],
        GroupConfig {
            auto_commit_interval: None,
            ..GroupConfig::default()
        },
    )
    .unwrap();
    assert!(member.poll().unwrap().is_empty());
    let outages = member.outages();
    assert!(
        outages.iter().any(|o| o.topic == "later"
            && o.partition.is_none()
            && o.error.code() == Some(protocol::ErrorCode::UnknownTopic)
            && o.error.to_string().contains("does not exist (yet)")),
        "{outages:?}"
    );
    client
        .create_topic("later", 2, &TopicSettings::default())
        .unwrap();
    let mut producer = Producer::new(
        &client,
        "later",
        ProducerConfig {
            acks: AckMode::Flushed,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    for i in 0..20u64 {
        producer
            .send_to((i % 2) as u32, None, &numbered_payload(i, 16))
            .unwrap();
    }
    producer.flush().unwrap();
    let mut got = Vec::new();
    harness::eventually(
        "the member reads the new topic over TLS",
        Duration::from_secs(60),
        || {
            for m in member.poll().map_err(|e| e.to_string())? {
                got.push(check_numbered_payload(&m.value, 16));
            }
            (got.len() >= 20)
                .then_some(())
                .ok_or(format!("{} of 20", got.len()))
        },
    );
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    assert!(member.outages().is_empty(), "{:?}", member.outages());
    member.close().unwrap();
}
