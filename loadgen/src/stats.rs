//! Counting a run: totals, latency histograms (hdrhistogram), a throughput
//! time series, and the periodic report lines benchmark users expect.
//!
//! Every 5 s a line in the form of `kafka-producer-perf-test` goes to
//! stderr (`N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms
//! max latency.`), covering the last window; when stderr is a terminal a
//! progress line is redrawn in between. The final summary adds the
//! percentiles.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Latency percentiles of a run, in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    /// Samples recorded.
    pub count: u64,
    /// Mean.
    pub avg_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// 50th percentile.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// The percentile curve: (percentile, ms) from 0 to 99.999.
    pub curve: Vec<(f64, f64)>,
}

/// A run's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Messages counted.
    pub messages: u64,
    /// Payload bytes counted.
    pub bytes: u64,
    /// Measured wall time (after warm-up).
    pub elapsed_s: f64,
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// Payload megabytes (10^6 bytes) per second.
    pub mb_per_sec: f64,
    /// Latency, where the workload measures it (acknowledged produce, e2e).
    pub latency: Option<LatencySummary>,
    /// Messages per second, one sample per second of the run: (t seconds, msg/s).
    pub series: Vec<(f64, f64)>,
}

impl Summary {
    /// The kafka-perf-test style closing line.
    pub fn line(&self, verb: &str) -> String {
        let mut line = format!(
            "{} records {verb}, {:.1} records/sec ({:.2} MB/sec)",
            self.messages, self.msgs_per_sec, self.mb_per_sec
        );
        match &self.latency {
            Some(l) => line.push_str(&format!(
                ", {:.2} ms avg latency, {:.2} ms max latency, {:.2} ms 50th, {:.2} ms 95th, {:.2} ms 99th, {:.2} ms 99.9th.",
                l.avg_ms, l.max_ms, l.p50_ms, l.p95_ms, l.p99_ms, l.p999_ms
            )),
            None => line.push('.'),
        }
        line
    }
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 1 hour, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3)
        .unwrap_or_else(|_| unreachable!("static bounds are valid"))
}

fn latency_summary(h: &Histogram<u64>) -> Option<LatencySummary> {
    if h.is_empty() {
        return None;
    }
    let ms = |us: u64| us as f64 / 1000.0;
    let curve = [
        0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999,
    ]
    .iter()
    .map(|&p| (p, ms(h.value_at_quantile(p / 100.0))))
    .collect();
    Some(LatencySummary {
        count: h.len(),
        avg_ms: h.mean() / 1000.0,
        max_ms: ms(h.max()),
        p50_ms: ms(h.value_at_quantile(0.50)),
        p95_ms: ms(h.value_at_quantile(0.95)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        curve,
    })
}

struct Latency {
    total: Histogram<u64>,
    window: Histogram<u64>,
}

/// Shared counters of one run; cheap to update from several threads.
pub struct Stats {
    started: Mutex<Instant>,
    frozen: Mutex<Option<Duration>>,
    messages: AtomicU64,
    bytes: AtomicU64,
    latency: Mutex<Latency>,
    series: Mutex<Vec<(f64, f64)>>,
    /// (seconds, messages) at the last time-series sample.
    last_sample: Mutex<(f64, u64)>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            started: Mutex::new(Instant::now()),
            frozen: Mutex::new(None),
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            latency: Mutex::new(Latency {
                total: histogram(),
                window: histogram(),
            }),
            series: Mutex::new(Vec::new()),
            last_sample: Mutex::new((0.0, 0)),
        }
    }
}

impl Stats {
    /// A fresh, shared counter set.
    pub fn new() -> Arc<Stats> {
        Arc::new(Stats::default())
    }

    /// Counts messages and their payload bytes.
    pub fn add(&self, messages: u64, bytes: u64) {
        self.messages.fetch_add(messages, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records `count` samples of a latency.
    pub fn record_latency(&self, latency: Duration, count: u64) {
        let us = (latency.as_micros() as u64).max(1);
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        l.total.saturating_record_n(us, count);
        l.window.saturating_record_n(us, count);
    }

    /// Forgets everything counted so far (the end of a warm-up).
    pub fn reset(&self) {
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        *self.frozen.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.messages.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        l.total.reset();
        l.window.reset();
        self.series
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        *self.last_sample.lock().unwrap_or_else(|p| p.into_inner()) = (0.0, 0);
    }

    /// Adds a time-series point: the rate since the previous point.
    pub fn sample(&self) {
        let t = self.elapsed().as_secs_f64();
        let now = self.messages();
        let mut last = self.last_sample.lock().unwrap_or_else(|p| p.into_inner());
        let dt = t - last.0;
        if dt <= 0.005 {
            return;
        }
        let rate = now.saturating_sub(last.1) as f64 / dt;
        *last = (t, now);
        drop(last);
        self.series
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((t, rate));
    }

    /// Messages counted so far.
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Stops the clock: the run's measured time ends now, even if the
    /// caller goes on waiting (for a flush, say) before summarising.
    pub fn freeze(&self) {
        self.sample();
        let elapsed = self.elapsed();
        *self.frozen.lock().unwrap_or_else(|p| p.into_inner()) = Some(elapsed);
    }

    /// Time since the start (or the last reset), or until `freeze`.
    pub fn elapsed(&self) -> Duration {
        if let Some(frozen) = *self.frozen.lock().unwrap_or_else(|p| p.into_inner()) {
            return frozen;
        }
        self.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// The result so far.
    pub fn summary(&self) -> Summary {
        let elapsed = self.elapsed().as_secs_f64().max(1e-9);
        let messages = self.messages();
        let bytes = self.bytes.load(Ordering::Relaxed);
        let latency =
            latency_summary(&self.latency.lock().unwrap_or_else(|p| p.into_inner()).total);
        Summary {
            messages,
            bytes,
            elapsed_s: elapsed,
            msgs_per_sec: messages as f64 / elapsed,
            mb_per_sec: bytes as f64 / 1e6 / elapsed,
            latency,
            series: self
                .series
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    fn window_latency(&self) -> Option<(f64, f64)> {
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let out = (!l.window.is_empty())
            .then(|| (l.window.mean() / 1000.0, l.window.max() as f64 / 1000.0));
        l.window.reset();
        out
    }
}

/// Prints the periodic lines and samples the time series until dropped.
pub struct Reporter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How long into a run the throughput series is sampled every 10 ms: the
/// README's demo sends a million messages in about a third of a second,
/// which at 100 ms gave two or three samples ("run too short to chart").
const SAMPLE_FASTEST_FOR: Duration = Duration::from_secs(1);

/// ... and then every 100 ms (afterwards once a second).
const SAMPLE_FAST_FOR: Duration = Duration::from_secs(3);

impl Reporter {
    /// Starts reporting on `stats`. `verb` is "sent" or "received";
    /// `expected` (if known) drives the progress bar.
    pub fn start(
        stats: Arc<Stats>,
        label: String,
        verb: &'static str,
        expected: Option<u64>,
    ) -> Reporter {
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let tty = std::io::stderr().is_terminal();
        let thread = std::thread::Builder::new()
            .name("loadgen-reporter".into())
            .spawn(move || {
                let mut last_second = 0u64;
                let mut last_window = (Instant::now(), 0u64, 0u64);
                let mut last_tick = Instant::now();
                while !thread_stop.load(Ordering::Relaxed) {
                    if stats.elapsed() < SAMPLE_FASTEST_FOR {
                        std::thread::sleep(Duration::from_millis(10));
                        stats.sample();
                        if last_tick.elapsed() < Duration::from_millis(100) {
                            continue;
                        }
                    } else {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    last_tick = Instant::now();
                    let elapsed = stats.elapsed();
                    let second = elapsed.as_secs();
                    // A run of a second or two still gets a chart: sample
                    // every tick at first, then once a second.
                    if elapsed < SAMPLE_FAST_FOR {
                        stats.sample();
                    }
                    if second < last_second {
                        // The stats were reset (end of warm-up): start over.
                        last_second = second;
                        last_window = (
                            Instant::now(),
                            stats.messages(),
                            stats.bytes.load(Ordering::Relaxed),
                        );
                    }
                    if second > last_second {
                        last_second = second;
                        stats.sample();
                    }
                    if last_window.0.elapsed() >= Duration::from_secs(5) {
                        let (messages, bytes) =
                            (stats.messages(), stats.bytes.load(Ordering::Relaxed));
                        let secs = last_window.0.elapsed().as_secs_f64();
                        let n = messages.saturating_sub(last_window.1);
                        let b = bytes.saturating_sub(last_window.2);
                        let latency = match stats.window_latency() {
                            Some((avg, max)) => {
                                format!(", {avg:.1} ms avg latency, {max:.1} ms max latency")
                            }
                            None => String::new(),
                        };
                        if tty {
                            eprint!("\r\x1b[K");
                        }
                        eprintln!(
                            "{n} records {verb}, {:.1} records/sec ({:.2} MB/sec){latency}.",
                            n as f64 / secs,
                            b as f64 / 1e6 / secs
                        );
                        last_window = (Instant::now(), messages, bytes);
                    }
                    if tty {
                        progress(&label, stats.messages(), expected, elapsed);
                    }
                }
                if tty {
                    eprint!("\r\x1b[K");
                }
            })
            .ok();
        Reporter { stop, thread }
    }
}

fn progress(label: &str, done: u64, expected: Option<u64>, elapsed: Duration) {
    let rate = done as f64 / elapsed.as_secs_f64().max(1e-9);
    let mut err = std::io::stderr().lock();
    match expected {
        Some(total) if total > 0 => {
            let fraction = (done as f64 / total as f64).min(1.0);
            let filled = (fraction * 30.0) as usize;
            let _ = write!(
                err,
                "\r\x1b[K{label} [{}{}] {:>5.1}% {done}/{total} {rate:.0} msg/s",
                "=".repeat(filled),
                " ".repeat(30 - filled),
                fraction * 100.0
            );
        }
        _ => {
            let _ = write!(err, "\r\x1b[K{label} {done} {rate:.0} msg/s");
        }
    }
    let _ = err.flush();
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `work` with a fresh [`Stats`] and the 5-second report lines on
/// stderr (`label`, `verb`: "produce", "sent"), not counting the first
/// `warmup_secs`; returns the work's result and the run's summary.
pub fn measure<T>(
    label: &str,
    verb: &'static str,
    expected: Option<u64>,
    warmup_secs: f64,
    work: impl FnOnce(&Arc<Stats>) -> anyhow::Result<T>,
) -> anyhow::Result<(T, Summary)> {
    let stats = Stats::new();
    let reporter = Reporter::start(stats.clone(), label.to_string(), verb, expected);
    if warmup_secs > 0.0 {
        let stats = stats.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(warmup_secs));
            stats.reset();
        });
    }
    let result = work(&stats);
    drop(reporter);
    Ok((result?, stats.summary()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_count_and_take_percentiles() {
        let stats = Stats::new();
        stats.add(10, 2000);
        for ms in 1..=100u64 {
            stats.record_latency(Duration::from_millis(ms), 1);
        }
        let summary = stats.summary();
        assert_eq!(summary.messages, 10);
        assert_eq!(summary.bytes, 2000);
        let latency = summary.latency.clone().unwrap();
        assert_eq!(latency.count, 100);
        assert!((latency.p50_ms - 50.0).abs() < 0.5, "{latency:?}");
        assert!((latency.max_ms - 100.0).abs() < 0.5, "{latency:?}");
        assert!(summary.line("sent").starts_with("10 records sent, "));
        stats.reset();
        assert_eq!(stats.summary().messages, 0);
        assert!(stats.summary().latency.is_none());
    }
}
