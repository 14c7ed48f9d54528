//! What a running mirror reports: per partition its lag (against the
//! source's end as last seen, growing while the source is silent), what it
//! copied and its state with the last error, as Prometheus metrics served
//! at `--metrics`, and `ringlog mirror status`, which reads them back as a
//! table.

use super::{Copy, SILENT};
use anyhow::Context;
use std::collections::BTreeMap;
use std::time::Duration;

/// How far behind the source a copy is, in seconds: since it fell
/// behind, or, when its source has not answered for a while (or it
/// stopped), at least since the last answer: not progressing, whatever it
/// saw last.
fn lag_seconds(c: &Copy) -> f64 {
    if !c.mine {
        return 0.0;
    }
    let behind = c.behind_since.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let silent = c.answered_at.map_or(0.0, |at| at.elapsed().as_secs_f64());
    if c.stopped.is_some() || silent >= SILENT.as_secs_f64() {
        behind.max(silent)
    } else {
        behind
    }
}

/// A copy's state in one word, and the error that goes with it.
fn state(c: &Copy) -> (&'static str, &str) {
    match (&c.stopped, &c.last_error) {
        (Some(why), _) => ("stopped", why.as_str()),
        _ if !c.mine => ("another_mirrors", ""),
        (None, Some(error)) => ("retrying", error.as_str()),
        (None, None) if c.at_end => ("caught_up", ""),
        (None, None) => ("copying", ""),
    }
}

/// A label value: what Prometheus' text format takes without escapes
/// (and `mirror status` reads back as it is).
fn label_value(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            c if c.is_control() => ' ',
            c => c,
        })
        .take(400)
        .collect()
}

/// The metrics text of every partition's copy (Prometheus exposition).
pub(super) fn render(
    copies: &BTreeMap<(String, u32), Copy>,
    groups_copied: u64,
    refused: &BTreeMap<String, String>,
    matched: usize,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let series = [
        (
            "ringlog_mirror_lag_bytes",
            "gauge",
            "Bytes the copy is behind the source's end as last seen.",
        ),
        (
            "ringlog_mirror_lag_seconds",
            "gauge",
            "How long the copy has been behind the source, or its source silent (0: caught up).",
        ),
        (
            "ringlog_mirror_copied_bytes_total",
            "counter",
            "Bytes appended to the copy by this run.",
        ),
        (
            "ringlog_mirror_copied_messages_total",
            "counter",
            "Messages appended to the copy by this run.",
        ),
        (
            "ringlog_mirror_errors_total",
            "counter",
            "Failed reads and appends (each retried).",
        ),
    ];
    for (i, (name, kind, help)) in series.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for ((topic, partition), c) in copies {
            let position = c.position.unwrap_or(0);
            let value = match i {
                0 => c.source_end.saturating_sub(position) as f64,
                1 => lag_seconds(c),
                2 => c.bytes as f64,
                3 => c.messages as f64,
                _ => c.errors as f64,
            };
            let _ = writeln!(
                out,
                "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {value}"
            );
        }
    }
    render_states(&mut out, copies, refused);
    let _ = writeln!(
        out,
        "# HELP ringlog_mirror_group_offsets_copied_total Committed offsets copied to the target's groups.\n# TYPE ringlog_mirror_group_offsets_copied_total counter\nringlog_mirror_group_offsets_copied_total {groups_copied}"
    );
    let _ = writeln!(
        out,
        "# HELP ringlog_mirror_topics_matched Source topics --topics matched at the last look (0: nothing to copy yet).\n# TYPE ringlog_mirror_topics_matched gauge\nringlog_mirror_topics_matched {matched}"
    );
    out
}

/// Each copy's state with its last error, and the refused topics.
fn render_states(
    out: &mut String,
    copies: &BTreeMap<(String, u32), Copy>,
    refused: &BTreeMap<String, String>,
) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP ringlog_mirror_partition_state A copy's state (copying, caught_up, retrying, stopped, another_mirrors) and its last error.\n# TYPE ringlog_mirror_partition_state gauge"
    );
    for ((topic, partition), c) in copies {
        let (state, error) = state(c);
        let _ = writeln!(
            out,
            "ringlog_mirror_partition_state{{topic=\"{topic}\",partition=\"{partition}\",state=\"{state}\",error=\"{}\"}} 1",
            label_value(error)
        );
    }
    let _ = writeln!(
        out,
        "# HELP ringlog_mirror_topic_refused A matching source topic the mirror does not copy, and why.\n# TYPE ringlog_mirror_topic_refused gauge"
    );
    for (topic, why) in refused {
        let _ = writeln!(
            out,
            "ringlog_mirror_topic_refused{{topic=\"{topic}\",error=\"{}\"}} 1",
            label_value(why)
        );
    }
}

/// Serves the latest metrics text at `address`, one answer per connection.
pub(super) fn serve_metrics(
    address: &str,
) -> anyhow::Result<std::sync::Arc<std::sync::Mutex<String>>> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("--metrics {address}: cannot listen there"))?;
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shared = text.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            // The request, up to its blank line (a scraper may send it in
            // pieces; answering before it is all read resets the socket).
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let body = shared.lock().map(|t| t.clone()).unwrap_or_default();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(text)
}

/// The value of `key` in a metric line's labels (as [`label_value`]
/// wrote it: no escapes).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// Prints a running mirror's metrics as a table: per partition its lag,
/// what it copied and its state with the last error; then the matching
/// topics it refused.
pub fn status(metrics: &str) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(metrics).with_context(|| {
        format!("no mirror answers at {metrics} (start it with --metrics {metrics})")
    })?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {metrics}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let mut rows: BTreeMap<(String, u32), ([f64; 5], String)> = BTreeMap::new();
    let mut refused = Vec::new();
    let names = [
        "ringlog_mirror_lag_bytes",
        "ringlog_mirror_lag_seconds",
        "ringlog_mirror_copied_bytes_total",
        "ringlog_mirror_copied_messages_total",
        "ringlog_mirror_errors_total",
    ];
    for line in text.lines().filter(|l| l.starts_with("ringlog_mirror_")) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        if name == "ringlog_mirror_topic_refused" {
            if let (Some(topic), Some(error)) = (label(labels, "topic"), label(labels, "error")) {
                refused.push(format!("{topic}: {error}"));
            }
            continue;
        }
        let (Some(topic), Some(partition)) = (label(labels, "topic"), label(labels, "partition"))
        else {
            continue;
        };
        let row = rows
            .entry((topic.to_string(), partition.parse().unwrap_or(0)))
            .or_default();
        if name == "ringlog_mirror_partition_state" {
            let state = label(labels, "state").unwrap_or_default();
            row.1 = match label(labels, "error") {
                Some(error) if !error.is_empty() => format!("{state}: {error}"),
                _ => state.to_string(),
            };
        } else if let Some(column) = names.iter().position(|n| *n == name) {
            row.0[column] = value.parse().unwrap_or(0.0);
        }
    }
    println!(
        "topic\tpartition\tlag_bytes\tlag_seconds\tcopied_bytes\tcopied_messages\terrors\tstate"
    );
    for ((topic, partition), (v, state)) in rows {
        println!(
            "{topic}\t{partition}\t{}\t{:.1}\t{}\t{}\t{}\t{state}",
            v[0] as u64, v[1], v[2] as u64, v[3] as u64, v[4] as u64
        );
    }
    for line in refused {
        println!("refused {line}");
    }
    Ok(())
}
