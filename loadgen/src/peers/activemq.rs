//! ActiveMQ 5.17 over STOMP 1.2, set up as in the paper: persistent
//! messages to a queue, the broker flushing its journal asynchronously, the
//! consumer acknowledging automatically.
//!
//! Why a small STOMP client here rather than a crate: the Rust STOMP crates
//! are unmaintained, OpenWire has no Rust client, and STOMP is a plain text
//! protocol of a handful of frames (CONNECT, SEND, SUBSCRIBE, BEGIN/COMMIT,
//! RECEIPT, MESSAGE) that ActiveMQ speaks natively.
//!
//! Publishing modes: `Async` sends one message at a time without a receipt
//! (the paper's mode; a final SEND with a receipt marks the end, since the
//! broker handles a connection's frames in order), and `Transacted(n)`
//! groups n SENDs per transaction and waits for each COMMIT's receipt —
//! ActiveMQ's batched, safe publishing mode.

use crate::stats::Stats;
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The default address `deploy/peers.sh` starts ActiveMQ's STOMP connector on.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:61613";

/// How messages are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// One at a time, persistent, no receipt (the paper's mode).
    Async,
    /// `n` SENDs per transaction, each COMMIT waited for.
    Transacted(usize),
}

/// A received STOMP frame.
#[derive(Debug, Default)]
struct Frame {
    command: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Frame {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Stomp {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

impl Stomp {
    fn connect(address: &str) -> anyhow::Result<Stomp> {
        let stream = TcpStream::connect(address)
            .with_context(|| format!("ActiveMQ is not reachable at {address}; start it with `deploy/peers.sh start activemq`"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut stomp = Stomp {
            reader: BufReader::with_capacity(256 * 1024, stream.try_clone()?),
            writer: BufWriter::with_capacity(256 * 1024, stream),
        };
        stomp.send_frame(
            "CONNECT",
            &[
                ("accept-version", "1.2"),
                ("host", "localhost"),
                ("heart-beat", "0,0"),
            ],
            &[],
        )?;
        stomp.writer.flush()?;
        let reply = stomp.read_frame()?;
        if reply.command != "CONNECTED" {
            bail!(
                "ActiveMQ refused the STOMP connection: {} {}",
                reply.command,
                String::from_utf8_lossy(&reply.body)
            );
        }
        Ok(stomp)
    }

    fn send_frame(
        &mut self,
        command: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<()> {
        let w = &mut self.writer;
        w.write_all(command.as_bytes())?;
        w.write_all(b"\n")?;
        for (k, v) in headers {
            writeln!(w, "{k}:{v}")?;
        }
        if !body.is_empty() {
            writeln!(w, "content-length:{}", body.len())?;
        }
        w.write_all(b"\n")?;
        w.write_all(body)?;
        w.write_all(b"\0")
    }

    fn read_frame(&mut self) -> anyhow::Result<Frame> {
        let mut line = String::new();
        // Skip heart-beat newlines between frames.
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("ActiveMQ closed the STOMP connection");
            }
            if !line.trim_end().is_empty() {
                break;
            }
        }
        let mut frame = Frame {
            command: line.trim_end().to_string(),
            ..Frame::default()
        };
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("ActiveMQ closed the STOMP connection mid-frame");
            }
            let header = line.trim_end_matches(['\n', '\r']);
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                frame.headers.push((k.to_string(), v.to_string()));
            }
        }
        match frame
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            Some(len) => {
                frame.body.resize(len, 0);
                self.reader.read_exact(&mut frame.body)?;
                let mut nul = [0u8; 1];
                self.reader.read_exact(&mut nul)?;
            }
            None => {
                self.reader.read_until(0, &mut frame.body)?;
                frame.body.pop();
            }
        }
        if frame.command == "ERROR" {
            bail!(
                "ActiveMQ: {} {}",
                frame.header("message").unwrap_or_default(),
                String::from_utf8_lossy(&frame.body)
            );
        }
        Ok(frame)
    }

    /// Flushes and waits for the RECEIPT of `id`.
    fn await_receipt(&mut self, id: &str) -> anyhow::Result<()> {
        self.writer.flush()?;
        loop {
            let frame = self.read_frame()?;
            if frame.command == "RECEIPT" && frame.header("receipt-id") == Some(id) {
                return Ok(());
            }
        }
    }
}

/// True when an ActiveMQ STOMP connector answers at `address`.
pub fn reachable(address: &str) -> bool {
    Stomp::connect(address).is_ok()
}

/// Sends `messages` persistent messages of `size` bytes to `queue`.
pub fn produce(
    address: &str,
    queue: &str,
    messages: u64,
    size: usize,
    mode: Publish,
    stats: &Stats,
) -> anyhow::Result<()> {
    let mut stomp = Stomp::connect(address)?;
    let destination = format!("/queue/{queue}");
    let payload = vec![b'a'; size];
    stats.reset();
    let mut sent = 0u64;
    let mut transaction = 0u64;
    while sent < messages {
        match mode {
            Publish::Async => {
                stomp.send_frame(
                    "SEND",
                    &[("destination", &destination), ("persistent", "true")],
                    &payload,
                )?;
                sent += 1;
                if sent.is_multiple_of(64) {
                    stats.add(64, 64 * size as u64);
                }
            }
            Publish::Transacted(n) => {
                transaction += 1;
                let tx = format!("tx-{transaction}");
                stomp.send_frame("BEGIN", &[("transaction", &tx)], &[])?;
                let in_tx = (n.max(1) as u64).min(messages - sent);
                for _ in 0..in_tx {
                    stomp.send_frame(
                        "SEND",
                        &[
                            ("destination", &destination),
                            ("persistent", "true"),
                            ("transaction", &tx),
                        ],
                        &payload,
                    )?;
                }
                let receipt = format!("commit-{transaction}");
                stomp.send_frame(
                    "COMMIT",
                    &[("transaction", &tx), ("receipt", &receipt)],
                    &[],
                )?;
                stomp.await_receipt(&receipt)?;
                sent += in_tx;
                stats.add(in_tx, in_tx * size as u64);
            }
        }
    }
    if mode == Publish::Async {
        stats.add(sent % 64, (sent % 64) * size as u64);
        // The broker handles a connection's frames in order: the receipt of
        // a last, empty DISCONNECT means every SEND before it was processed.
        stomp.send_frame("DISCONNECT", &[("receipt", "end")], &[])?;
        stomp.await_receipt("end")?;
    }
    stats.freeze();
    Ok(())
}

/// Receives `messages` from `queue` with automatic acknowledgement.
pub fn consume(address: &str, queue: &str, messages: u64, stats: &Stats) -> anyhow::Result<()> {
    let mut stomp = Stomp::connect(address)?;
    let destination = format!("/queue/{queue}");
    stats.reset();
    stomp.send_frame(
        "SUBSCRIBE",
        &[
            ("destination", &destination),
            ("id", "0"),
            ("ack", "auto"),
            ("activemq.prefetchSize", "1000"),
        ],
        &[],
    )?;
    stomp.writer.flush()?;
    let mut received = 0u64;
    while received < messages {
        let frame = stomp
            .read_frame()
            .with_context(|| format!("ActiveMQ delivered {received} of {messages} messages"))?;
        if frame.command == "MESSAGE" {
            received += 1;
            stats.add(1, frame.body.len() as u64);
        }
    }
    stats.freeze();
    let _ = stomp.send_frame("DISCONNECT", &[], &[]);
    let _ = stomp.writer.flush();
    Ok(())
}
