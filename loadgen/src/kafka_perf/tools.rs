//! The outside clients `loadgen kafka-perf` runs, each a process, and what
//! their reports say: Kafka's own `ProducerPerformance` and
//! `ConsumerPerformance` (kafka-tools 4.4, the classes behind
//! `kafka-producer-perf-test.sh` and `kafka-consumer-perf-test.sh`) and
//! librdkafka through kcat. Each run also gives the client's CPU time (its
//! rusage once reaped) and its wall time.

use anyhow::{bail, Context};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where Kafka's jars are, and a quiet logging configuration for the tools.
pub struct KafkaTools {
    /// Kafka's home (its `libs/`).
    pub home: PathBuf,
    /// A log4j2 configuration that keeps the tools' INFO lines out.
    pub log_config: PathBuf,
}

/// What one client process did.
pub struct ClientRun {
    /// Everything it printed on stdout (when kept).
    pub stdout: String,
    /// Lines it printed on stdout.
    pub lines: u64,
    /// Its wall time, start to exit.
    pub wall: Duration,
    /// Its CPU time (user + system).
    pub cpu: Duration,
}

/// The summary line of a `ProducerPerformance` run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProducerReport {
    /// Records sent and acknowledged.
    pub records: u64,
    /// Records per second.
    pub records_per_s: f64,
    /// Megabytes (2^20) per second.
    pub mb_per_s: f64,
    /// Mean latency from send to acknowledgement, milliseconds.
    pub avg_ms: f64,
    /// The longest, milliseconds.
    pub max_ms: f64,
    /// Its median, milliseconds.
    pub p50_ms: f64,
    /// Its 95th percentile, milliseconds.
    pub p95_ms: f64,
    /// Its 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Its 99.9th percentile, milliseconds.
    pub p999_ms: f64,
}

/// The summary line of a `ConsumerPerformance` run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConsumerReport {
    /// Records consumed.
    pub records: u64,
    /// Records per second over the whole run, the group's join included.
    pub records_per_s: f64,
    /// Time to join the group, milliseconds.
    pub rebalance_ms: f64,
    /// Records per second while fetching (the join excluded).
    pub fetch_records_per_s: f64,
    /// Megabytes (2^20) per second while fetching.
    pub fetch_mb_per_s: f64,
}

impl KafkaTools {
    /// Kafka's tools from `home`, logging at WARN through a configuration
    /// written into `dir`.
    pub fn new(home: &Path, dir: &Path) -> anyhow::Result<KafkaTools> {
        if !home.join("libs").is_dir() {
            bail!(
                "Kafka's jars are not in {} (install them with `deploy/peers.sh install kafka`)",
                home.join("libs").display()
            );
        }
        let log_config = dir.join("tools-log4j2.properties");
        std::fs::write(
            &log_config,
            "rootLogger.level = warn\nrootLogger.appenderRef.err.ref = err\n\
             appender.err.type = Console\nappender.err.name = err\n\
             appender.err.target = SYSTEM_ERR\nappender.err.layout.type = PatternLayout\n\
             appender.err.layout.pattern = %d %p %c: %m%n\n",
        )?;
        Ok(KafkaTools {
            home: home.to_path_buf(),
            log_config,
        })
    }

    fn java(&self, class: &str) -> Command {
        let mut command = Command::new("java");
        command
            .arg("-Xms512M")
            .arg("-Xmx1G")
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.log_config.display()
            ))
            .arg("-cp")
            .arg(self.home.join("libs").join("*"))
            .arg(class);
        command
    }

    /// Creates `topic` with Kafka's own topic tool (`kafka-topics.sh
    /// --create`: CreateTopics through Kafka's AdminClient).
    pub fn create_topic(
        &self,
        bootstrap: &str,
        topic: &str,
        partitions: u32,
        replicas: u32,
        configs: &[String],
    ) -> anyhow::Result<()> {
        let mut command = self.java("org.apache.kafka.tools.TopicCommand");
        command
            .args([
                "--bootstrap-server",
                bootstrap,
                "--create",
                "--topic",
                topic,
            ])
            .args(["--partitions", &partitions.to_string()])
            .args(["--replication-factor", &replicas.to_string()]);
        for config in configs {
            command.args(["--config", config]);
        }
        let run = run(command, false, "kafka-topics --create")?;
        if !run.stdout.contains("Created topic") {
            bail!("kafka-topics did not create {topic}: {}", run.stdout.trim());
        }
        Ok(())
    }

    /// `ProducerPerformance`: `records` of `size` bytes as fast as the
    /// producer goes, with `props` (bootstrap.servers, acks, …).
    pub fn produce(
        &self,
        topic: &str,
        records: u64,
        size: usize,
        props: &[String],
    ) -> anyhow::Result<(ProducerReport, ClientRun)> {
        let mut command = self.java("org.apache.kafka.tools.ProducerPerformance");
        command
            .args(["--topic", topic, "--throughput", "-1"])
            .args(["--num-records", &records.to_string()])
            .args(["--record-size", &size.to_string()])
            .arg("--producer-props")
            .args(props);
        let run = run(command, false, "ProducerPerformance")?;
        let report = run
            .stdout
            .lines()
            .rev()
            .find_map(producer_line)
            .with_context(|| {
                format!(
                    "no summary in ProducerPerformance's output: {}",
                    tail(&run.stdout)
                )
            })?;
        if report.records != records {
            bail!("ProducerPerformance sent {} of {records}", report.records);
        }
        Ok((report, run))
    }

    /// `ConsumerPerformance`: `records` from the start of `topic`, in a
    /// new group `group` (subscribe: the classic group protocol).
    pub fn consume(
        &self,
        bootstrap: &str,
        topic: &str,
        group: &str,
        records: u64,
    ) -> anyhow::Result<(ConsumerReport, ClientRun)> {
        let mut command = self.java("org.apache.kafka.tools.ConsumerPerformance");
        command
            .args(["--bootstrap-server", bootstrap, "--topic", topic])
            .args(["--group", group, "--timeout", "30000"])
            .args(["--num-records", &records.to_string()]);
        let run = run(command, false, "ConsumerPerformance")?;
        let report = run
            .stdout
            .lines()
            .rev()
            .find_map(consumer_line)
            .with_context(|| {
                format!(
                    "no summary in ConsumerPerformance's output: {}",
                    tail(&run.stdout)
                )
            })?;
        if report.records < records {
            bail!("ConsumerPerformance read {} of {records}", report.records);
        }
        Ok((report, run))
    }
}

impl KafkaTools {
    /// `ProducerPerformance` as fast as it goes for about `seconds`: its
    /// 5-second window lines as (seconds since it began sending, records/s),
    /// the process stopped after the window that reaches `seconds`.
    pub fn produce_for(
        &self,
        topic: &str,
        seconds: f64,
        size: usize,
        props: &[String],
    ) -> anyhow::Result<Vec<(f64, f64)>> {
        let mut command = self.java("org.apache.kafka.tools.ProducerPerformance");
        command
            .args(["--topic", topic, "--throughput", "-1"])
            .args(["--num-records", "2000000000"])
            .args(["--record-size", &size.to_string()])
            .arg("--producer-props")
            .args(props);
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting ProducerPerformance")?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Its windows are 5 s of sending each (reportingInterval).
        let windows = (seconds / WINDOW_S).ceil().max(1.0) as usize;
        let mut series = Vec::new();
        let deadline = Instant::now() + Duration::from_secs_f64(seconds + 60.0);
        while series.len() < windows && Instant::now() < deadline {
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(line) => {
                    if let Some(rate) = window_rate(&line) {
                        series.push(((series.len() + 1) as f64 * WINDOW_S, rate));
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        if series.len() < windows {
            bail!(
                "ProducerPerformance reported {} of {windows} windows",
                series.len()
            );
        }
        Ok(series)
    }

    /// Deletes `topic` with Kafka's topic tool.
    pub fn delete_topic(&self, bootstrap: &str, topic: &str) -> anyhow::Result<()> {
        let mut command = self.java("org.apache.kafka.tools.TopicCommand");
        command.args([
            "--bootstrap-server",
            bootstrap,
            "--delete",
            "--topic",
            topic,
        ]);
        run(command, false, "kafka-topics --delete").map(|_| ())
    }
}

/// Kafka's producer as fast as it goes: acks=0, 1 MiB batches, a 5 ms
/// linger, room for 256 MiB unsent.
pub fn fastest_producer(bootstrap: &str) -> Vec<String> {
    vec![
        format!("bootstrap.servers={bootstrap}"),
        "acks=0".into(),
        "batch.size=1048576".into(),
        "linger.ms=5".into(),
        "buffer.memory=268435456".into(),
        "max.request.size=10485760".into(),
    ]
}

/// `ProducerPerformance`'s reporting window.
const WINDOW_S: f64 = 5.0;

/// The records/s of a `ProducerPerformance` window line (`N records sent,
/// R records/sec (M MB/sec), …`), not its final summary.
fn window_rate(line: &str) -> Option<f64> {
    if line.contains("percentile") || line.contains("50th") {
        return None;
    }
    let (_, rest) = line.split_once(" records sent, ")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// kcat (librdkafka): produces every line of `lines` to `topic` with
/// `acks` and librdkafka's other defaults.
pub fn kcat_produce(
    bootstrap: &str,
    topic: &str,
    acks: &str,
    lines: &Path,
) -> anyhow::Result<ClientRun> {
    let mut command = Command::new("kcat");
    command
        .args(["-P", "-b", bootstrap, "-t", topic])
        .args(["-X", &format!("acks={acks}")])
        .stdin(Stdio::from(
            std::fs::File::open(lines).with_context(|| format!("opening {}", lines.display()))?,
        ));
    run(command, false, "kcat -P")
}

/// kcat: reads `records` messages of `topic` from its start and exits;
/// fails unless exactly that many came.
pub fn kcat_consume(bootstrap: &str, topic: &str, records: u64) -> anyhow::Result<ClientRun> {
    let mut command = Command::new("kcat");
    command
        .args(["-C", "-q", "-e", "-b", bootstrap, "-t", topic])
        .args(["-o", "beginning", "-c", &records.to_string()])
        // librdkafka 2.0 stops fetching a partition once 100,000 messages
        // wait in its queue and looks again only a second later: with a
        // broker that fills the queue faster than kcat prints, the run
        // measures those pauses. Room for the whole run keeps it fetching.
        .args([
            "-X",
            &format!("queued.min.messages={}", records.max(100_000)),
        ])
        // One byte per message: the count, not the payloads, crosses the pipe.
        .args(["-f", "\\n"]);
    let run = run(command, true, "kcat -C")?;
    let got = run.lines;
    if got != records {
        bail!("kcat read {got} of {records} messages");
    }
    Ok(run)
}

/// Writes `count` lines of `size` bytes each (printable, varied, no
/// newline inside) for kcat to produce.
pub fn write_lines(path: &Path, count: u64, size: usize) -> anyhow::Result<()> {
    use std::io::Write;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut line = vec![b'a'; size + 1];
    line[size] = b'\n';
    for i in 0..count {
        let digits = format!("{i:012}");
        let n = digits.len().min(size);
        line[..n].copy_from_slice(&digits.as_bytes()[..n]);
        for (j, b) in line[n..size].iter_mut().enumerate() {
            *b = b'a' + ((i as usize + j * 7) % 26) as u8;
        }
        out.write_all(&line)?;
    }
    out.flush()?;
    Ok(())
}

/// Runs `command` to its end, its stdout read (only its lines counted
/// when `count_only`, so a large output is not kept).
fn run(mut command: Command, count_only: bool, what: &str) -> anyhow::Result<ClientRun> {
    let before = children_cpu();
    let start = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut stderr = child.stderr.take().context("stderr")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut text = String::new();
    let mut lines = 0u64;
    if count_only {
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let n = stdout.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            lines += buffer[..n].iter().filter(|b| **b == b'\n').count() as u64;
        }
    } else {
        stdout.read_to_string(&mut text)?;
        lines = text.lines().count() as u64;
    }
    let status = child.wait()?;
    let wall = start.elapsed();
    let errors = errors.join().unwrap_or_default();
    if !status.success() {
        bail!("{what} failed ({status}): {}", tail(&errors));
    }
    Ok(ClientRun {
        stdout: text,
        lines,
        wall,
        cpu: children_cpu().saturating_sub(before),
    })
}

/// CPU time of this process's reaped children so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes into the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The last lines of a tool's output, for an error.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// `1000000 records sent, 235460.3 records/sec (44.91 MB/sec), 434.61 ms
/// avg latency, 610.00 ms max latency, 452 ms 50th, 585 ms 95th, 600 ms
/// 99th, 609 ms 99.9th.` — the numbers in order.
fn producer_line(line: &str) -> Option<ProducerReport> {
    if !line.contains("records sent") || !line.contains("99.9th") {
        return None;
    }
    let numbers: Vec<f64> = line
        .split([' ', '(', ','])
        .filter_map(|word| word.parse::<f64>().ok())
        .collect();
    let [records, records_per_s, mb_per_s, avg_ms, max_ms, p50_ms, p95_ms, p99_ms, p999_ms] =
        numbers[..]
    else {
        return None;
    };
    Some(ProducerReport {
        records: records as u64,
        records_per_s,
        mb_per_s,
        avg_ms,
        max_ms,
        p50_ms,
        p95_ms,
        p99_ms,
        p999_ms,
    })
}

/// `start.time, end.time, data.consumed.in.MB, MB.sec,
/// data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms,
/// fetch.MB.sec, fetch.nMsg.sec` — a line of those ten values.
fn consumer_line(line: &str) -> Option<ConsumerReport> {
    let fields: Vec<&str> = line.split(", ").collect();
    if fields.len() != 10 {
        return None;
    }
    let number = |i: usize| fields[i].trim().parse::<f64>().ok();
    Some(ConsumerReport {
        records: number(4)? as u64,
        records_per_s: number(5)?,
        rebalance_ms: number(6)?,
        fetch_mb_per_s: number(8)?,
        fetch_records_per_s: number(9)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_producer_tools_summary_is_read_number_by_number() {
        let line = "1000000 records sent, 235460.324935 records/sec (44.91 MB/sec), \
                    434.61 ms avg latency, 610.00 ms max latency, 452 ms 50th, 585 ms 95th, \
                    600 ms 99th, 609 ms 99.9th.";
        let report = producer_line(line).expect("a summary");
        assert_eq!(report.records, 1_000_000);
        assert_eq!(report.records_per_s, 235460.324935);
        assert_eq!(report.mb_per_s, 44.91);
        assert_eq!((report.avg_ms, report.max_ms), (434.61, 610.0));
        assert_eq!(
            (report.p50_ms, report.p95_ms, report.p99_ms, report.p999_ms),
            (452.0, 585.0, 600.0, 609.0)
        );
        // The progress lines every 5 s have no percentiles.
        let progress = "429000 records sent, 85782.8 records/sec (16.36 MB/sec), \
                        1205.7 ms avg latency, 1596.0 ms max latency.";
        assert_eq!(producer_line(progress), None);
        // ... and are what a timed run reads; the summary is not a window.
        assert_eq!(window_rate(progress), Some(85782.8));
        assert_eq!(window_rate(line), None);
    }

    #[test]
    fn the_consumer_tools_summary_is_its_ten_fields() {
        let line = "2026-12-07 20:35:34:568, 2026-12-07 20:35:38:919, 190.7349, 43.8370, \
                    1000000, 229832.2225, 3516, 835, 228.4250, 1197604.7904";
        let report = consumer_line(line).expect("a summary");
        assert_eq!(report.records, 1_000_000);
        assert_eq!(report.records_per_s, 229832.2225);
        assert_eq!(report.rebalance_ms, 3516.0);
        assert_eq!(report.fetch_mb_per_s, 228.425);
        assert_eq!(report.fetch_records_per_s, 1197604.7904);
        let header = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, \
                      nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec";
        assert_eq!(consumer_line(header), None);
    }

    #[test]
    fn kcats_lines_have_the_size_asked_and_differ() {
        let dir = std::env::temp_dir().join(format!("kafka-perf-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lines");
        write_lines(&path, 3, 20).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.len() == 20), "{lines:?}");
        assert_ne!(lines[0], lines[1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
