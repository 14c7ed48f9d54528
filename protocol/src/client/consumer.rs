//! The consumer of one partition: pull chunks from an offset, verify every
//! message, and resume where the last whole message ended.
//!
//! A fetch returns up to `max_bytes` of the log and may end in the middle of
//! a message (the broker sends file bytes, it does not parse them). The
//! consumer hands out the whole messages and starts the next fetch at the
//! first incomplete one. A message larger than `max_bytes` can never arrive
//! whole, so it is reported as `MessageTooLarge` instead of looping. The
//! broker keeps no consumer state: the position lives here (`seek` to rewind).
//!
//! In a cluster the consumer talks to the shard that owns its partition, on
//! the broker that stores it. If a broker answers NOT_OWNER (the consumer
//! was pointed at the wrong broker), the consumer asks for metadata,
//! connects to the owner and fetches again. A broken or timed-out
//! connection is replaced the same way, up to the client's
//! [`ClientConfig::retries`](super::ClientConfig::retries) times with
//! backoff, so a broker restart is a pause, not an error: a fetch reads
//! and changes nothing, so sending it again is always safe.
//!
//! On a replicated partition every chunk is of one leader epoch, and the
//! consumer sends the epoch of the last message it consumed with each
//! fetch (KIP-320). If an unclean election made a replica that lacked those
//! messages the leader, the leader answers where that epoch ends in its
//! log; the consumer records a [`Truncation`] (what it had read that is
//! gone), moves back to that offset and goes on from there.

use super::walk::{walk_chunk, ChunkPlace};
use super::{Client, ClientError, Connection, ResponseFrame};
use crate::codec::{self, verify, FetchArgs, PartitionOffsets, ReplicaFetch};
use crate::frame::Api;
use crate::message::{Message, MessageSetIter};
use crate::stored::MessageFormat;
use crate::wire;
use crate::ErrorCode;
use std::time::Duration;

/// A message copied out of a fetch chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedMessage {
    /// Its offset.
    pub offset: u64,
    /// Its key, if keyed.
    pub key: Option<Vec<u8>>,
    /// Its payload.
    pub value: Vec<u8>,
    /// Format 2: its time (ms since the Unix epoch).
    pub timestamp: Option<i64>,
    /// Format 2: its headers.
    pub headers: crate::batch::records::OwnedHeaders,
}

/// Messages a consumer had read that are gone from the partition: an
/// unclean election made a replica that lacked them the leader, and the log
/// was cut at `from`, below the consumer's position `to`. Offsets from
/// `from` on hold other messages now; the consumer continues at `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// Where the log ends now (where the consumer continues).
    pub from: u64,
    /// Where the consumer was: `[from, to)` was read and is gone.
    pub to: u64,
}

/// Truncations a consumer keeps until they are taken: one per unclean
/// election under it, so a handful at most, but bounded anyway.
const TRUNCATIONS_KEPT: usize = 64;

/// What a consumer does when its position is outside the partition's
/// retained range (retention removed it, or the log was cut shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutOfRange {
    /// Return the `OFFSET_OUT_OF_RANGE` error (with the valid range). The
    /// default: skipping data should be a decision.
    #[default]
    Fail,
    /// Continue from the first retained offset.
    Earliest,
    /// Continue from the end of the log.
    Latest,
}

/// Reads one partition. Not thread-safe; may move between threads.
pub struct Consumer {
    conn: Connection,
    /// For metadata and timeouts when reconnecting; a consumer made over a
    /// bare connection asks the broker it was connected to.
    client: Option<Client>,
    topic: String,
    partition: u32,
    offset: u64,
    max_bytes: u32,
    max_wait_ms: u32,
    frame: ResponseFrame,
    offsets: PartitionOffsets,
    /// The position was reached by reading whole valid messages (or given
    /// by the broker): a bad message here is damage, not a wrong offset.
    verified: bool,
    out_of_range: OutOfRange,
    /// Overrides the client's retries for one poll (a group consumer takes
    /// one attempt per poll and backs off across polls).
    retries: Option<u32>,
    /// The topic's id when the consumer started (empty: unknown).
    topic_id: String,
    /// The leader epoch of the message before the position (-1: unknown).
    epoch: i32,
    /// Cuts of the log found under the position, oldest first.
    truncations: Vec<Truncation>,
}

impl Consumer {
    /// A consumer of `topic`/`partition` starting at `offset`, connected to
    /// the shard that owns the partition.
    pub fn new(
        client: &Client,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<Consumer, ClientError> {
        let metadata = client.metadata(&[topic])?;
        let address = client.partition_address(&metadata, topic, partition)?;
        let mut consumer =
            Consumer::with_connection(client.open(&address)?, topic, partition, offset);
        consumer.client = Some(client.clone());
        consumer.topic_id = super::topic_id(&metadata, topic);
        Ok(consumer)
    }

    /// A consumer starting at the earliest or latest offset, or at the first
    /// segment appended to since `timestamp_ms` (with `OffsetSpec::BeforeTime`;
    /// ignored otherwise), as ListOffsets answers.
    pub fn new_at(
        client: &Client,
        topic: &str,
        partition: u32,
        spec: crate::codec::OffsetSpec,
        timestamp_ms: u64,
    ) -> Result<Consumer, ClientError> {
        let (offset, _) = client.list_offsets(topic, partition, spec, timestamp_ms)?;
        let mut consumer = Consumer::new(client, topic, partition, offset)?;
        consumer.verified = true;
        Ok(consumer)
    }

    /// What to do when the position falls outside the retained log
    /// (default [`OutOfRange::Fail`]).
    pub fn set_out_of_range(&mut self, policy: OutOfRange) {
        self.out_of_range = policy;
    }

    /// Connects to the owner of the partition, as the client's brokers (or
    /// the broker this consumer is connected to) see it.
    fn reroute(&mut self) -> Result<(), ClientError> {
        let client = match &self.client {
            Some(client) => client.clone(),
            None => Client::connect(self.conn.address())?,
        };
        let metadata = client.metadata(&[&self.topic])?;
        // The position belongs to the topic this consumer started on: a
        // topic of the same name created since is another log.
        super::check_topic_id(&metadata, &self.topic, &self.topic_id)?;
        let address = client.partition_address(&metadata, &self.topic, self.partition)?;
        self.conn = client.open(&address)?;
        Ok(())
    }

    /// Fetches, rerouting after NOT_OWNER and reconnecting after a broken
    /// or timed-out connection, with the client's retries and backoff.
    fn fetch_retrying(&mut self) -> Result<(), ClientError> {
        let config = self.client.as_ref().map(|c| c.config().clone());
        let retries = self
            .retries
            .unwrap_or(config.as_ref().map_or(1, |c| c.retries));
        let mut attempt = 0;
        loop {
            let error = match self.fetch_once() {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            let not_owner = error.moved();
            let passes = not_owner
                || error.is_connection_error()
                || (error.is_retriable() && error.code().is_some());
            if !passes || attempt >= retries {
                return Err(error);
            }
            // NOT_OWNER is news to act on at once; anything else waits.
            if !not_owner || attempt > 0 {
                if let Some(config) = &config {
                    std::thread::sleep(config.backoff(attempt));
                }
            }
            attempt += 1;
            if not_owner || error.is_connection_error() {
                // A failed reconnect is one more attempt, not the end.
                while let Err(reconnect) = self.reroute() {
                    if attempt >= retries || !reconnect.is_retriable() {
                        return Err(reconnect);
                    }
                    if let Some(config) = &config {
                        std::thread::sleep(config.backoff(attempt));
                    }
                    attempt += 1;
                }
            }
        }
    }

    /// Sends one fetch and receives its response into `self.frame`.
    fn fetch_once(&mut self) -> Result<(), ClientError> {
        let header = codec::replica_fetch_request(
            &mut self.conn.fbb,
            &self.topic,
            &self.topic_id,
            self.partition,
            FetchArgs {
                offset: self.offset,
                max_bytes: self.max_bytes,
                max_wait_ms: self.max_wait_ms,
            },
            &ReplicaFetch {
                last_fetched_epoch: self.epoch,
                ..ReplicaFetch::consumer()
            },
        )
        .to_vec();
        self.conn
            .expect_wait(Duration::from_millis(u64::from(self.max_wait_ms)))?;
        self.conn.send(Api::Fetch, &header, &[])?;
        self.conn.flush()?;
        self.conn.recv_into(&mut self.frame)
    }

    /// A consumer over an existing connection (any shard; the broker forwards).
    pub fn with_connection(conn: Connection, topic: &str, partition: u32, offset: u64) -> Consumer {
        Consumer {
            conn,
            client: None,
            topic: topic.to_string(),
            partition,
            offset,
            max_bytes: 256 * 1024,
            max_wait_ms: 500,
            frame: ResponseFrame::default(),
            offsets: PartitionOffsets::default(),
            verified: offset == 0,
            out_of_range: OutOfRange::Fail,
            retries: None,
            topic_id: String::new(),
            epoch: -1,
            truncations: Vec::new(),
        }
    }

    /// How many times one poll reconnects or refetches after an error that
    /// passes, instead of the client's `retries`.
    pub fn set_retries(&mut self, retries: u32) {
        self.retries = Some(retries);
    }

    /// Bytes asked for per fetch (default 256 KiB; the paper used ~200 KB).
    pub fn set_max_bytes(&mut self, max_bytes: u32) {
        self.max_bytes = max_bytes.max(1);
    }

    /// How long a fetch waits at the end of the log (default 500 ms).
    pub fn set_max_wait_ms(&mut self, max_wait_ms: u32) {
        self.max_wait_ms = max_wait_ms;
    }

    /// The offset of the next message to be returned.
    pub fn position(&self) -> u64 {
        self.offset
    }

    /// Moves to another offset (rewind or skip). It must be a message
    /// boundary: the start, a value from `position`, or a listed offset;
    /// if it is not, the next poll fails with [`ClientError::InvalidOffset`].
    pub fn seek(&mut self, offset: u64) {
        self.offset = offset;
        self.verified = offset == 0;
        self.epoch = -1;
    }

    /// Moves to a committed position: `offset` and the leader epoch of the
    /// message before it (-1: unknown), which the next fetch checks.
    pub fn seek_committed(&mut self, offset: u64, leader_epoch: i32) {
        self.seek(offset);
        self.epoch = leader_epoch.max(-1);
    }

    /// The leader epoch of the message before the position (-1: unknown, or
    /// a partition with one copy): what a commit of the position stores.
    pub fn position_epoch(&self) -> i32 {
        self.epoch
    }

    /// Takes the truncations found under the position since the last call.
    pub fn take_truncations(&mut self) -> Vec<Truncation> {
        std::mem::take(&mut self.truncations)
    }

    /// The partition's offsets as of the last fetch.
    pub fn last_offsets(&self) -> PartitionOffsets {
        self.offsets
    }

    /// True when the last fetch reached the flushed end of the log.
    pub fn at_end(&self) -> bool {
        self.offset >= self.offsets.flushed_offset
    }

    /// Fetches once and calls `f` for each whole message, in order. Returns
    /// how many messages were delivered (0 when nothing new arrived within
    /// the wait).
    pub fn poll_with(&mut self, mut f: impl FnMut(Message<'_>)) -> Result<usize, ClientError> {
        let answer = self.fetch_positioned()?;
        let chunk_epoch = answer.chunk_epoch;
        let place = ChunkPlace {
            topic: &self.topic,
            partition: self.partition,
            offset: answer.offset,
            from: self.offset,
            format: answer.format,
            verified: self.verified,
            flushed_offset: answer.flushed_offset,
            max_bytes: self.max_bytes,
        };
        match walk_chunk(&place, &self.frame.payload, &mut f) {
            Ok(walked) => {
                self.verified |= walked.delivered > 0;
                if walked.next_offset != self.offset {
                    self.epoch = chunk_epoch;
                }
                self.offset = walked.next_offset;
                Ok(walked.delivered)
            }
            Err((error, at)) => {
                self.offset = at;
                match error {
                    ClientError::MessageTooLarge { size, .. } => {
                        Err(self.too_large_or_damaged(size, error))
                    }
                    error => Err(error),
                }
            }
        }
    }

    /// A message said to be `size` bytes did not fit the fetch size: asks
    /// for exactly that much. A chunk is cut only at its segment's end (or
    /// its epoch's, or the visible end), and no message spans any of them,
    /// so if the broker sends fewer bytes, the message never completes
    /// where it is: its length field is damaged
    /// (bit rot, or a torn tail that recovery kept because later segments
    /// were whole), and the answer is [`ClientError::Corrupt`], which
    /// [`Consumer::skip_damaged`] moves past — not a fetch size to raise.
    fn too_large_or_damaged(&mut self, size: usize, too_large: ClientError) -> ClientError {
        let (at, saved) = (self.offset, self.max_bytes);
        self.max_bytes = u32::try_from(size).unwrap_or(u32::MAX);
        let fetched = self.fetch_positioned();
        self.max_bytes = saved;
        match fetched {
            Ok(_) if self.offset == at && self.frame.payload.len() < size => ClientError::Corrupt {
                partition: format!("{}-{}", self.topic, self.partition),
                source: crate::message::MessageError::Incomplete {
                    position: 0,
                    missing: size - self.frame.payload.len(),
                }
                .into(),
            },
            _ => {
                self.offset = at;
                too_large
            }
        }
    }

    /// Fetches the chunk at the position into `self.frame` (retrying, and
    /// moving the position as the out-of-range policy says), checks the
    /// response against the request and records the partition's offsets.
    /// Returns what the answer says of the chunk.
    fn fetch_positioned(&mut self) -> Result<FetchAnswer, ClientError> {
        let answer = self.fetch_answer()?;
        if let Some((cut, epoch)) = answer.cut_under(&self.topic, self.partition, self.offset) {
            // Continue at the cut, a message boundary.
            self.offset = cut.from;
            self.epoch = epoch;
            if self.truncations.len() < TRUNCATIONS_KEPT {
                self.truncations.push(cut);
            }
            self.verified = true;
            let answer = self.fetch_answer()?;
            return self.take_answer(&answer);
        }
        self.take_answer(&answer)
    }

    /// Records the partition's offsets of an answer; returns its flushed
    /// offset and chunk epoch.
    fn take_answer(&mut self, answer: &FetchAnswer) -> Result<FetchAnswer, ClientError> {
        if answer.diverging.is_some_and(|(_, end)| end < self.offset) {
            return Err(ClientError::Protocol(format!(
                "{}-{}: the leader reported the log cut under offset {} twice in a row",
                self.topic, self.partition, self.offset
            )));
        }
        self.offsets = PartitionOffsets {
            start_offset: answer.start_offset,
            flushed_offset: answer.flushed_offset,
            end_offset: answer.flushed_offset,
        };
        Ok(*answer)
    }

    /// Fetches the chunk at the position (retrying, and moving the position
    /// as the out-of-range policy says) and checks the answer.
    fn fetch_answer(&mut self) -> Result<FetchAnswer, ClientError> {
        match self.fetch_retrying() {
            Err(ClientError::Broker {
                code: ErrorCode::OffsetOutOfRange,
                range: Some((start, end)),
                ..
            }) if self.out_of_range != OutOfRange::Fail => {
                self.offset = if self.out_of_range == OutOfRange::Earliest {
                    start
                } else {
                    end
                };
                self.verified = true;
                self.epoch = -1;
                self.fetch_retrying()?;
            }
            other => other?,
        }
        check_fetch_response(&self.frame, self.offset)
    }

    /// For the prefetcher's thread: fetches the chunk at the position and
    /// returns it (the frame is swapped for `spare`, so buffers circulate
    /// instead of being reallocated), its offset and the flushed offset; the
    /// position moves to the chunk's byte end — where the next chunk starts,
    /// whether or not this one ends at a message boundary.
    ///
    /// Format 2 (the last value returned) is cut to its whole batches and
    /// the position moves to their end instead: a batch cut by the chunk's
    /// end would be fetched again from its start (the broker serves a
    /// batch whole from its start), so the bytes could not simply be
    /// joined. A first batch larger than the fetch size is fetched whole.
    /// The chunk may start below the position (inside its first batch).
    pub(super) fn fetch_chunk(
        &mut self,
        spare: ResponseFrame,
    ) -> Result<(ResponseFrame, u64, u64, MessageFormat), ClientError> {
        let mut answer = self.fetch_positioned()?;
        if answer.format == MessageFormat::Two {
            if let crate::stored::Unit::Incomplete { need } =
                crate::stored::unit(MessageFormat::Two, &self.frame.payload, answer.offset)
            {
                if need > self.max_bytes as usize && !self.frame.payload.is_empty() {
                    let saved = self.max_bytes;
                    self.max_bytes = u32::try_from(need).unwrap_or(u32::MAX);
                    let fetched = self.fetch_positioned();
                    self.max_bytes = saved;
                    answer = fetched?;
                }
            }
            if let Ok((whole, _)) =
                crate::stored::framed_units(MessageFormat::Two, &self.frame.payload)
            {
                // Nothing whole (a damaged or cut first batch): handed over
                // as it is, for the walk to say what is wrong.
                if whole > 0 {
                    self.frame.payload.truncate(whole);
                }
            }
        }
        let frame = std::mem::replace(&mut self.frame, spare);
        if !frame.payload.is_empty() {
            self.epoch = answer.chunk_epoch;
        }
        let end = answer.offset + frame.payload.len() as u64;
        self.offset = end.max(self.offset);
        Ok((frame, answer.offset, answer.flushed_offset, answer.format))
    }

    /// Places the consumer at `offset`, known (or not) to be a message
    /// boundary — where a prefetcher's application got to.
    pub(super) fn set_position(&mut self, offset: u64, verified: bool) {
        // The epoch is known only for the fetcher's own position.
        if offset != self.offset {
            self.epoch = -1;
        }
        self.offset = offset;
        self.verified = verified;
    }

    pub(super) fn verified(&self) -> bool {
        self.verified
    }

    pub(super) fn topic(&self) -> &str {
        &self.topic
    }

    pub(super) fn partition(&self) -> u32 {
        self.partition
    }

    /// Moves past a damaged message at the current position (a poll that
    /// returned [`ClientError::Corrupt`]): fetches from here and looks for
    /// the first later position where two whole messages in a row (or one
    /// that ends the log) pass their length and CRC checks, and resumes
    /// there. A CRC check gives a false match once in 2^32; two in a row make
    /// a wrong resume point practically impossible. Returns how many bytes
    /// were skipped; messages inside them are lost to this consumer.
    /// The paper's messages only: on a topic of message format 2 it fails
    /// with [`ClientError::Usage`] and the position stays.
    pub fn skip_damaged(&mut self) -> Result<u64, ClientError> {
        let from = self.offset;
        let mut probe = from + 1;
        let saved_wait = self.max_wait_ms;
        self.max_wait_ms = 0;
        let found = loop {
            self.offset = probe;
            if let Err(error) = self.fetch_once() {
                break Err(error);
            }
            let flushed = match verify::<wire::FetchResponse>(&self.frame.header) {
                // The search below reads the paper's messages: a format-2
                // log's batches are not found by it.
                Ok(response) if response.message_format() == 2 => {
                    break Err(ClientError::Usage(format!(
                        "{}-{} stores message format 2, whose damaged batches this consumer does not skip yet: seek past the batch at offset {from} by hand",
                        self.topic, self.partition
                    )));
                }
                Ok(response) => response.flushed_offset(),
                Err(e) => break Err(ClientError::Protocol(format!("fetch response: {e}"))),
            };
            let chunk = &self.frame.payload;
            if chunk.is_empty() {
                break Err(ClientError::Usage(format!(
                    "no valid message after the damage at offset {from} in {}-{} (the log ends at {flushed})",
                    self.topic, self.partition
                )));
            }
            // A position where one whole valid message starts, but the chunk
            // ends before the next: fetch again from there to check it.
            let mut refetch_from = None;
            let mut resume = None;
            for start in 0..chunk.len() {
                let mut iter = MessageSetIter::new(&chunk[start..], probe + start as u64);
                if !matches!(iter.next(), Some(Ok(_))) {
                    continue;
                }
                match iter.next() {
                    Some(Ok(_)) => {
                        resume = Some(start);
                        break;
                    }
                    Some(Err(_)) => {}
                    // One whole message that ends the log is enough, and so
                    // is one that fills the chunk from its start.
                    None if iter.next_offset() == flushed || start == 0 => {
                        resume = Some(start);
                        break;
                    }
                    None => {
                        refetch_from = Some(start);
                        break;
                    }
                }
            }
            match (resume, refetch_from) {
                (Some(start), _) => break Ok(probe + start as u64),
                (None, Some(start)) => probe += start as u64,
                (None, None) => probe += chunk.len() as u64,
            }
        };
        self.max_wait_ms = saved_wait;
        match found {
            Ok(resume) => {
                self.offset = resume;
                self.verified = true;
                Ok(resume - from)
            }
            Err(error) => {
                self.offset = from;
                Err(error)
            }
        }
    }

    /// Fetches once and returns copies of the whole messages.
    pub fn poll(&mut self) -> Result<Vec<OwnedMessage>, ClientError> {
        let mut out = Vec::new();
        self.poll_with(|m| {
            out.push(OwnedMessage {
                offset: m.offset,
                key: m.key.map(<[u8]>::to_vec),
                value: m.value.to_vec(),
                timestamp: m.timestamp,
                headers: m.headers.to_owned_vec(),
            })
        })?;
        Ok(out)
    }
}

/// What a fetch answer says besides its bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct FetchAnswer {
    /// Where the chunk starts: the offset asked for, or (format 2) the
    /// start of the batch that holds it.
    pub offset: u64,
    /// What the chunk holds.
    pub format: MessageFormat,
    pub start_offset: u64,
    pub flushed_offset: u64,
    /// The leader epoch of the chunk's bytes (-1: not replicated).
    pub chunk_epoch: i32,
    /// The fetcher's last epoch ends in the leader's log there.
    pub diverging: Option<(i32, u64)>,
}

impl FetchAnswer {
    /// The cut an unclean election made under `offset`, as the leader
    /// reports it: what was read and is gone, and the epoch to continue in.
    pub fn cut_under(&self, topic: &str, partition: u32, offset: u64) -> Option<(Truncation, i32)> {
        let (epoch, end) = self.diverging.filter(|&(_, end)| end < offset)?;
        let cut = Truncation {
            topic: topic.to_string(),
            partition,
            from: end,
            to: offset,
        };
        Some((cut, epoch))
    }
}

/// Checks a fetch response against the request (offset `offset`) and
/// returns what it says.
pub(super) fn check_fetch_response(
    frame: &ResponseFrame,
    offset: u64,
) -> Result<FetchAnswer, ClientError> {
    let response = verify::<wire::FetchResponse>(&frame.header)
        .map_err(|e| ClientError::Protocol(format!("fetch response: {e}")))?;
    let format = match response.message_format() {
        2 => MessageFormat::Two,
        _ => MessageFormat::One,
    };
    // Format 2: the start of the batch that holds the offset, at most a
    // batch below it.
    let starts_well = response.offset() == offset
        || (format == MessageFormat::Two
            && response.offset() < offset
            && offset - response.offset() < crate::batch::BATCH_BYTES_MAX as u64);
    if !starts_well || response.length() as usize != frame.payload.len() {
        return Err(ClientError::Protocol(format!(
            "fetch response for offset {} with {} bytes does not match the request for offset {offset} ({} bytes received)",
            response.offset(),
            response.length(),
            frame.payload.len()
        )));
    }
    Ok(FetchAnswer {
        offset: response.offset(),
        format,
        start_offset: response.start_offset(),
        flushed_offset: response.flushed_offset(),
        chunk_epoch: response.chunk_epoch(),
        diverging: (response.diverging_epoch() >= 0)
            .then(|| (response.diverging_epoch(), response.diverging_end_offset())),
    })
}
