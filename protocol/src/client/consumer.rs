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
//! was pointed at the wrong broker), the consumer asks that broker for
//! metadata, connects to the owner and fetches again, once per poll.

use super::{Client, ClientError, Connection, ResponseFrame};
use crate::codec::{self, verify, FetchArgs, PartitionOffsets};
use crate::frame::Api;
use crate::message::{Message, MessageSetIter};
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
}

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

/// Reads one partition. Not thread-safe.
pub struct Consumer {
    conn: Connection,
    topic: String,
    partition: u32,
    offset: u64,
    max_bytes: u32,
    max_wait_ms: u32,
    frame: ResponseFrame,
    offsets: PartitionOffsets,
    out_of_range: OutOfRange,
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
        let address = client.owner_address(&metadata, topic, partition);
        Ok(Consumer::with_connection(
            Connection::connect(&address)?,
            topic,
            partition,
            offset,
        ))
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
        Consumer::new(client, topic, partition, offset)
    }

    /// How long a fetch may take beyond its `max_wait_ms` before it fails
    /// with [`ClientError::Timeout`] (default 30 s); after a timeout, make a
    /// new consumer at [`Consumer::position`].
    pub fn set_request_timeout(&mut self, timeout: Duration) -> Result<(), ClientError> {
        self.conn.set_request_timeout(timeout)
    }

    /// What to do when the position falls outside the retained log
    /// (default [`OutOfRange::Fail`]).
    pub fn set_out_of_range(&mut self, policy: OutOfRange) {
        self.out_of_range = policy;
    }

    /// Connects to the owner of the partition, as the broker this consumer
    /// is connected to sees it.
    fn reroute(&mut self) -> Result<(), ClientError> {
        let client = Client::connect(self.conn.address())?;
        let metadata = client.metadata(&[&self.topic])?;
        let address = client.owner_address(&metadata, &self.topic, self.partition);
        self.conn = Connection::connect(&address)?;
        Ok(())
    }

    /// Sends one fetch and receives its response into `self.frame`.
    fn fetch_once(&mut self) -> Result<(), ClientError> {
        let header = codec::fetch_request(
            &mut self.conn.fbb,
            &self.topic,
            self.partition,
            FetchArgs {
                offset: self.offset,
                max_bytes: self.max_bytes,
                max_wait_ms: self.max_wait_ms,
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
            topic: topic.to_string(),
            partition,
            offset,
            max_bytes: 256 * 1024,
            max_wait_ms: 500,
            frame: ResponseFrame::default(),
            offsets: PartitionOffsets::default(),
            out_of_range: OutOfRange::Fail,
        }
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
    /// boundary: the start, a value from `position`, or a listed offset.
    pub fn seek(&mut self, offset: u64) {
        self.offset = offset;
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
        match self.fetch_once() {
            Err(error) if error.code() == Some(ErrorCode::NotOwner) => {
                self.reroute()?;
                self.fetch_once()?;
            }
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
                self.fetch_once()?;
            }
            other => other?,
        }
        let response = verify::<wire::FetchResponse>(&self.frame.header)
            .map_err(|e| ClientError::Protocol(format!("fetch response: {e}")))?;
        if response.offset() != self.offset
            || response.length() as usize != self.frame.payload.len()
        {
            return Err(ClientError::Protocol(format!(
                "fetch response for offset {} with {} bytes does not match the request for offset {} ({} bytes received)",
                response.offset(),
                response.length(),
                self.offset,
                self.frame.payload.len()
            )));
        }
        self.offsets = PartitionOffsets {
            start_offset: response.start_offset(),
            flushed_offset: response.flushed_offset(),
            end_offset: response.flushed_offset(),
        };
        let mut iter = MessageSetIter::new(&self.frame.payload, self.offset);
        let mut delivered = 0;
        for message in iter.by_ref() {
            match message {
                Ok(message) => {
                    f(message);
                    delivered += 1;
                }
                Err(source) => {
                    self.offset = iter.next_offset();
                    return Err(ClientError::Corrupt {
                        partition: format!("{}-{}", self.topic, self.partition),
                        source,
                    });
                }
            }
        }
        if delivered == 0 && !self.frame.payload.is_empty() {
            if let Some((size, present)) = iter.incomplete() {
                // Flushed data always ends at a message boundary: a message
                // still incomplete at the flushed end never completes, so
                // this offset is not a message boundary (or the data is
                // damaged). Say so instead of waiting forever.
                let chunk_end = self.offset + self.frame.payload.len() as u64;
                if chunk_end >= self.offsets.flushed_offset {
                    return Err(ClientError::Corrupt {
                        partition: format!("{}-{}", self.topic, self.partition),
                        source: crate::message::MessageError::Incomplete {
                            position: iter.position(),
                            missing: size.saturating_sub(present).max(1),
                        },
                    });
                }
                if size > self.max_bytes as usize {
                    return Err(ClientError::MessageTooLarge {
                        offset: self.offset,
                        size,
                        max_bytes: self.max_bytes,
                    });
                }
            }
        }
        self.offset = iter.next_offset();
        Ok(delivered)
    }

    /// Moves past a damaged message at the current position (a poll that
    /// returned [`ClientError::Corrupt`]): fetches from here and looks for
    /// the first later position where two whole messages in a row (or one
    /// that ends the log) pass their length and CRC checks, and resumes
    /// there. A CRC check gives a false match once in 2^32; two in a row make
    /// a wrong resume point practically impossible. Returns how many bytes
    /// were skipped; messages inside them are lost to this consumer.
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
            })
        })?;
        Ok(out)
    }
}
