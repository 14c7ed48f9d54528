//! A partition consumer that keeps the pipe full: a fetcher thread reads
//! the next chunks while the application checks and uses this one.
//!
//! A plain [`Consumer`] takes turns with the broker: it asks, waits for the
//! chunk, then checks every message's CRC and hands the messages over while
//! the broker idles. Here the [`Consumer`] moves into a fetcher thread that
//! asks for the next chunk as soon as the last byte of the previous one has
//! arrived, and queues up to `depth` chunks; [`PrefetchConsumer::poll_with`]
//! walks them on the application's thread. So the receive copy (the fetcher)
//! and the CRC checks (the application) run at once, and the broker always
//! has a request to answer.
//!
//! When to use it: for a broker across a network, where every fetch pays a
//! round trip and the consumer's cores are its own. With the broker on the
//! same two cores it is slower than a plain [`Consumer`] (the receive copy
//! costs twice as much when another core checks the bytes, and there is no
//! idle core to win): see `broker/docs/design/0009-fetching-ahead.md`.
//!
//! The fetcher cannot wait for the walk to learn where the last whole
//! message ended, so it continues at the chunk's byte end (offsets are byte
//! positions): a message cut by a chunk's end is kept here (`carry`) and
//! completed from the next chunk. A message larger than one fetch is
//! therefore assembled from several instead of failing as
//! `MessageTooLarge` (it is still bounded by the format's 16 MiB).
//!
//! Memory: `depth` chunks of `max_bytes` queued, one being received, one
//! being walked, plus the carry (at most one message).
//!
//! Errors: a fetch error (after the consumer's own retries) or a bad message
//! is returned by `poll_with`; the next call starts a fresh fetcher at the
//! application's position, so a poll after an error retries, as with a
//! plain consumer. [`seek`](PrefetchConsumer::seek) and
//! [`skip_damaged`](PrefetchConsumer::skip_damaged) stop the fetcher
//! (waiting at most for its fetch in flight), act, and start it again.

use super::walk::{walk_chunk, ChunkPlace};
use super::{ClientError, Consumer, ResponseFrame, Truncation};
use crate::codec::PartitionOffsets;
use crate::message::{Message, MESSAGE_BYTES_MAX};
use crate::stored::MessageFormat;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the fetcher thread hands over.
enum Fetched {
    Chunk {
        frame: ResponseFrame,
        /// The byte offset the chunk starts at.
        offset: u64,
        /// What it holds.
        format: MessageFormat,
        start_offset: u64,
        flushed_offset: u64,
        /// Cuts of the log the fetch found under its position.
        truncations: Vec<Truncation>,
    },
    Failed(ClientError),
}

/// A running fetcher thread.
struct Fetcher {
    chunks: Receiver<Fetched>,
    /// Walked frames go back for reuse.
    spares: Sender<ResponseFrame>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Consumer>,
}

/// A [`Consumer`] with a fetcher thread ahead of the application.
pub struct PrefetchConsumer {
    /// The stopped consumer, between a stop and the next start.
    idle: Option<Consumer>,
    fetcher: Option<Fetcher>,
    depth: usize,
    /// The offset of the next message to hand over (where `carry` starts).
    position: u64,
    /// `position` is known to be a message boundary.
    verified: bool,
    /// The start of a message cut by the last chunk's end.
    carry: Vec<u8>,
    offsets: PartitionOffsets,
    topic: String,
    partition: u32,
    /// Cuts of the log found under the position, not yet taken.
    truncations: Vec<Truncation>,
}

impl PrefetchConsumer {
    /// Takes over `consumer` (its position, connection and settings) and
    /// starts fetching ahead, up to `depth` chunks (at least 1).
    pub fn new(consumer: Consumer, depth: usize) -> PrefetchConsumer {
        let mut prefetch = PrefetchConsumer {
            position: consumer.position(),
            verified: consumer.verified(),
            carry: Vec::new(),
            offsets: consumer.last_offsets(),
            topic: consumer.topic().to_string(),
            partition: consumer.partition(),
            idle: Some(consumer),
            fetcher: None,
            depth: depth.max(1),
            truncations: Vec::new(),
        };
        prefetch.start();
        prefetch
    }

    /// The offset of the next message `poll_with` hands over.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Takes the cuts of the log found under the position (an unclean
    /// election removed messages already handed over; see
    /// [`Consumer::take_truncations`]).
    pub fn take_truncations(&mut self) -> Vec<Truncation> {
        std::mem::take(&mut self.truncations)
    }

    /// The partition's offsets as of the last chunk walked.
    pub fn last_offsets(&self) -> PartitionOffsets {
        self.offsets
    }

    /// True when every message up to the flushed end (as of the last chunk)
    /// has been handed over.
    pub fn at_end(&self) -> bool {
        self.position >= self.offsets.flushed_offset
    }

    /// Waits up to `timeout` for the next chunk and calls `f` for each whole
    /// message in it, in order. Returns how many were delivered (0 when no
    /// chunk came, or the chunk only continued a cut message).
    pub fn poll_with(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(Message<'_>),
    ) -> Result<usize, ClientError> {
        if self.fetcher.is_none() {
            self.start();
        }
        let Some(fetcher) = &self.fetcher else {
            return Err(ClientError::Usage("the prefetcher did not start".into()));
        };
        let fetched = match fetcher.chunks.recv_timeout(timeout) {
            Ok(fetched) => fetched,
            Err(RecvTimeoutError::Timeout) => return Ok(0),
            // The thread ended without a word: it panicked.
            Err(RecvTimeoutError::Disconnected) => {
                self.stop();
                return Err(ClientError::Usage(format!(
                    "the fetcher of {}-{} stopped",
                    self.topic, self.partition
                )));
            }
        };
        match fetched {
            Fetched::Failed(error) => {
                self.stop();
                Err(error)
            }
            Fetched::Chunk {
                frame,
                offset,
                format,
                start_offset,
                flushed_offset,
                truncations,
            } => {
                // The fetcher reads ahead: only what was handed over is
                // lost to the application.
                for mut cut in truncations {
                    cut.to = cut.to.min(self.position);
                    if cut.from < cut.to {
                        self.truncations.push(cut);
                    }
                }
                self.offsets = PartitionOffsets {
                    start_offset,
                    flushed_offset,
                    end_offset: flushed_offset,
                };
                let walked = if format == MessageFormat::Two {
                    self.walk_batches(offset, flushed_offset, &frame.payload, &mut f)
                } else {
                    self.walk(offset, flushed_offset, &frame.payload, &mut f)
                };
                if let Some(fetcher) = &self.fetcher {
                    let _ = fetcher.spares.send(frame);
                }
                if walked.is_err() {
                    // The fetcher is past the bad message: restart it there
                    // (the next poll), so the error repeats until the
                    // application skips or seeks, as with a plain consumer.
                    self.stop();
                }
                walked
            }
        }
    }

    /// Moves to `offset` (dropping what was fetched ahead).
    pub fn seek(&mut self, offset: u64) -> Result<(), ClientError> {
        self.with_stopped(|consumer| {
            consumer.seek(offset);
            Ok(())
        })
    }

    /// [`Consumer::skip_damaged`] at the position; returns the bytes skipped.
    pub fn skip_damaged(&mut self) -> Result<u64, ClientError> {
        self.with_stopped(Consumer::skip_damaged)
    }

    /// Stops the fetcher and returns the consumer, positioned at the next
    /// message the application has not seen.
    pub fn into_inner(mut self) -> Result<Consumer, ClientError> {
        self.stop();
        self.idle.take().ok_or_else(|| {
            ClientError::Usage(format!(
                "the fetcher of {}-{} ended without its consumer",
                self.topic, self.partition
            ))
        })
    }

    fn with_stopped<T>(
        &mut self,
        act: impl FnOnce(&mut Consumer) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        self.stop();
        let consumer = self.idle.as_mut().ok_or_else(|| {
            ClientError::Usage(format!(
                "the fetcher of {}-{} ended without its consumer",
                self.topic, self.partition
            ))
        })?;
        let result = act(consumer);
        self.position = consumer.position();
        self.verified = consumer.verified();
        self.carry.clear();
        result
    }

    /// Starts a fetcher at the application's position.
    fn start(&mut self) {
        let Some(mut consumer) = self.idle.take() else {
            return;
        };
        // The fetcher continues at the byte end of what is held here.
        consumer.set_position(self.position + self.carry.len() as u64, self.verified);
        let (chunks_tx, chunks) = mpsc::sync_channel(self.depth);
        let (spares, spares_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("fetch-{}-{}", self.topic, self.partition))
                .spawn(move || fetch_ahead(consumer, &chunks_tx, &spares_rx, &stop))
        };
        match thread {
            Ok(thread) => {
                self.fetcher = Some(Fetcher {
                    chunks,
                    spares,
                    stop,
                    thread,
                })
            }
            // No thread (the process is out of them): the consumer is gone
            // with the closure; the next poll says so.
            Err(_) => self.fetcher = None,
        }
    }

    /// Stops the fetcher and takes its consumer back (at most one fetch in
    /// flight to wait for: a long-poll's `max_wait`).
    fn stop(&mut self) {
        let Some(fetcher) = self.fetcher.take() else {
            return;
        };
        fetcher.stop.store(true, Ordering::SeqCst);
        // Unblocks a send into a full queue.
        drop(fetcher.chunks);
        if let Ok(mut consumer) = fetcher.thread.join() {
            consumer.set_position(self.position, self.verified);
            self.idle = Some(consumer);
        }
    }

    /// Hands over the whole messages of the chunk at `offset`, completing
    /// the carried message first and carrying a cut one at the end.
    fn walk(
        &mut self,
        offset: u64,
        flushed_offset: u64,
        payload: &[u8],
        f: &mut impl FnMut(Message<'_>),
    ) -> Result<usize, ClientError> {
        if offset != self.position + self.carry.len() as u64 {
            // The fetcher moved (the out-of-range policy sent it to the
            // first or last retained offset, a message boundary).
            self.carry.clear();
            self.position = offset;
            self.verified = true;
        }
        let mut delivered = 0;
        let mut rest = payload;
        if !self.carry.is_empty() {
            let used = complete_message(&mut self.carry, rest);
            rest = &rest[used..];
            let place = self.place(flushed_offset);
            // One whole message, or a carry still too short (kept), or a bad
            // header or CRC, or a message cut at the flushed end: an error.
            let walked = walk_chunk(&place, &self.carry, f).map_err(|(error, _)| error)?;
            if walked.delivered == 0 {
                return Ok(0);
            }
            delivered += walked.delivered;
            self.verified = true;
            self.position = walked.next_offset;
            self.carry.clear();
        }
        let place = self.place(flushed_offset);
        match walk_chunk(&place, rest, f) {
            Ok(walked) => {
                delivered += walked.delivered;
                self.verified |= walked.delivered > 0;
                let used = (walked.next_offset - self.position) as usize;
                self.carry.extend_from_slice(&rest[used..]);
                self.position = walked.next_offset;
                Ok(delivered)
            }
            Err((error, at)) => {
                self.position = at;
                self.carry.clear();
                Err(error)
            }
        }
    }

    /// Format 2: the fetcher hands over whole batches (the chunk may start
    /// inside the first, below the position, after a start or a seek
    /// there), so nothing is carried.
    fn walk_batches(
        &mut self,
        offset: u64,
        flushed_offset: u64,
        payload: &[u8],
        f: &mut impl FnMut(Message<'_>),
    ) -> Result<usize, ClientError> {
        self.carry.clear();
        // A chunk above the position, or more than a batch below it: the
        // fetcher moved (the out-of-range policy).
        if offset > self.position || self.position - offset >= crate::batch::BATCH_BYTES_MAX as u64
        {
            self.position = offset;
            self.verified = true;
        }
        let place = ChunkPlace {
            offset,
            format: MessageFormat::Two,
            ..self.place(flushed_offset)
        };
        match walk_chunk(&place, payload, f) {
            Ok(walked) => {
                self.verified |= walked.delivered > 0;
                self.position = walked.next_offset;
                Ok(walked.delivered)
            }
            Err((error, at)) => {
                self.position = at;
                Err(error)
            }
        }
    }

    fn place(&self, flushed_offset: u64) -> ChunkPlace<'_> {
        ChunkPlace {
            topic: &self.topic,
            partition: self.partition,
            offset: self.position,
            from: self.position,
            format: MessageFormat::One,
            verified: self.verified,
            flushed_offset,
            // A message is assembled across chunks, so no chunk size is too
            // small; the format's own limit still applies.
            max_bytes: MESSAGE_BYTES_MAX as u32,
        }
    }
}

impl Drop for PrefetchConsumer {
    fn drop(&mut self) {
        // Without waiting: the thread ends after its fetch in flight.
        if let Some(fetcher) = self.fetcher.take() {
            fetcher.stop.store(true, Ordering::SeqCst);
        }
    }
}

/// The fetcher thread: fetch, queue, continue at the chunk's byte end.
fn fetch_ahead(
    mut consumer: Consumer,
    chunks: &SyncSender<Fetched>,
    spares: &Receiver<ResponseFrame>,
    stop: &AtomicBool,
) -> Consumer {
    while !stop.load(Ordering::SeqCst) {
        let spare = spares.try_recv().unwrap_or_default();
        let fetched = match consumer.fetch_chunk(spare) {
            Ok((frame, offset, flushed_offset, format)) => Fetched::Chunk {
                frame,
                offset,
                format,
                start_offset: consumer.last_offsets().start_offset,
                flushed_offset,
                truncations: consumer.take_truncations(),
            },
            Err(error) => {
                let _ = chunks.send(Fetched::Failed(error));
                break;
            }
        };
        if chunks.send(fetched).is_err() {
            break;
        }
    }
    consumer
}

/// Moves bytes from the front of `more` into `carry` until it holds the
/// whole message it starts (or `more` runs out); returns how many.
fn complete_message(carry: &mut Vec<u8>, more: &[u8]) -> usize {
    let mut used = 0;
    if carry.len() < 4 {
        used = (4 - carry.len()).min(more.len());
        carry.extend_from_slice(&more[..used]);
        if carry.len() < 4 {
            return used;
        }
    }
    let length = u32::from_le_bytes([carry[0], carry[1], carry[2], carry[3]]) as usize;
    // A bad length is reported by the walk; take nothing more for it.
    let whole = (4 + length).min(MESSAGE_BYTES_MAX);
    let take = whole.saturating_sub(carry.len()).min(more.len() - used);
    carry.extend_from_slice(&more[used..used + take]);
    used + take
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{encode_message, MessageSetIter};

    /// A walker without a fetcher: only `walk` and its state.
    fn walker() -> PrefetchConsumer {
        PrefetchConsumer {
            idle: None,
            fetcher: None,
            depth: 1,
            position: 0,
            verified: true,
            carry: Vec::new(),
            offsets: PartitionOffsets::default(),
            topic: "t".into(),
            partition: 0,
            truncations: Vec::new(),
        }
    }

    fn log_of(sizes: &[usize]) -> Vec<u8> {
        let mut log = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let value: Vec<u8> = (0..size).map(|b| (b + i) as u8).collect();
            encode_message(&mut log, None, &value);
        }
        log
    }

    /// Every way of cutting a log into chunks hands over the same messages
    /// as reading it whole, each once, in order.
    #[test]
    fn chunks_cut_anywhere_give_every_message_once() {
        let log = log_of(&[0, 1, 5, 200, 3, 1000, 7, 64, 2, 300]);
        let expected: Vec<(u64, Vec<u8>)> = MessageSetIter::new(&log, 0)
            .map(|m| m.map(|m| (m.offset, m.value.to_vec())))
            .collect::<Result<_, _>>()
            .expect("valid log");
        let end = log.len() as u64;
        for chunk_size in [1, 2, 3, 4, 5, 8, 9, 10, 13, 100, 211, 1000, 5000] {
            let mut w = walker();
            let mut got = Vec::new();
            for (i, chunk) in log.chunks(chunk_size).enumerate() {
                let offset = (i * chunk_size) as u64;
                w.walk(offset, end, chunk, &mut |m| {
                    got.push((m.offset, m.value.to_vec()))
                })
                .unwrap_or_else(|e| panic!("chunk size {chunk_size}: {e}"));
            }
            assert_eq!(got, expected, "chunk size {chunk_size}");
            assert_eq!(w.position, end);
            assert!(w.carry.is_empty());
        }
    }

    #[test]
    fn a_bad_crc_in_a_carried_message_is_an_error_at_its_offset() {
        let mut log = log_of(&[10, 20, 30]);
        let second = 4 + 5 + 10;
        log[second + 9 + 3] ^= 0x40;
        let mut w = walker();
        let end = log.len() as u64;
        let mut got = 0;
        // The cut falls inside the second message's body.
        let cut = second + 12;
        w.walk(0, end, &log[..cut], &mut |_| got += 1)
            .expect("first chunk");
        assert_eq!(got, 1);
        let error = w
            .walk(cut as u64, end, &log[cut..], &mut |_| got += 1)
            .expect_err("the carried message is damaged");
        assert!(
            matches!(error, ClientError::Corrupt { .. }),
            "unexpected: {error}"
        );
        assert_eq!(w.position, second as u64);
        assert_eq!(got, 1);
    }

    #[test]
    fn a_message_cut_at_the_flushed_end_is_an_error_not_a_wait() {
        let log = log_of(&[10, 20]);
        let mut w = walker();
        w.verified = false;
        w.position = 3;
        // Fetching from inside the first message: the flushed end cuts the
        // "message" found there.
        let error = w
            .walk(3, log.len() as u64, &log[3..], &mut |_| {})
            .expect_err("not a message boundary");
        assert!(
            matches!(
                error,
                ClientError::InvalidOffset { .. } | ClientError::Corrupt { .. }
            ),
            "unexpected: {error}"
        );
    }
}
