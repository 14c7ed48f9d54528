//! What a request is answered with: the reply's header and the log bytes
//! after it ([`Response`], [`Payload`]), a handler's failure ([`Failure`],
//! with the wire code and words), and when the answer comes
//! ([`Dispatched`]). The low room of the request path: the handlers, the
//! rules they share (`auth/`), and the connection that writes replies
//! (`net/`) all use these types, and this file uses none of theirs.

use crate::storage::{FetchSlice, StorageError};
use protocol::types::{BrokerId, PartitionId};
use protocol::ErrorCode;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;

/// Raw log bytes that follow a response header.
#[derive(Debug)]
pub enum Payload {
    /// Nothing follows.
    None,
    /// A range of a segment file owned by this shard.
    File(FetchSlice),
    /// Ranges of segment files owned by this shard, one after the other (a
    /// MultiFetch answer's chunks).
    Files(Vec<FetchSlice>),
    /// Bytes and ranges of segment files owned by this shard in turn (a
    /// Kafka Fetch answer: each partition's fields, then its records).
    Parts(Vec<Part>),
    /// A range of a segment file owned by another shard, by duplicated fd.
    Fd {
        /// The duplicated descriptor.
        fd: OwnedFd,
        /// Byte position in the file.
        position: u64,
        /// Bytes to send.
        len: u32,
    },
}

/// One piece of [`Payload::Parts`].
#[derive(Debug)]
pub enum Part {
    /// Bytes written as they are.
    Bytes(Vec<u8>),
    /// A range of a segment file, sent with sendfile.
    File(FetchSlice),
}

impl Part {
    /// Its bytes on the wire.
    pub fn len(&self) -> usize {
        match self {
            Part::Bytes(bytes) => bytes.len(),
            Part::File(slice) => slice.len as usize,
        }
    }

    /// True when it sends nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Payload {
    /// Bytes that follow the header.
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::File(slice) => slice.len as usize,
            Payload::Files(slices) => slices.iter().map(|s| s.len as usize).sum(),
            Payload::Parts(parts) => parts.iter().map(Part::len).sum(),
            Payload::Fd { len, .. } => *len as usize,
        }
    }

    /// True when nothing follows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A response ready to be framed.
#[derive(Debug)]
pub struct Response {
    /// The request's api.
    pub api: u16,
    /// `ErrorCode` as a number (0 = success).
    pub error: u16,
    /// Flatbuffer header bytes.
    pub header: Vec<u8>,
    /// Raw bytes after the header.
    pub payload: Payload,
}

/// A response that is not ready yet.
pub type Later = Pin<Box<dyn Future<Output = Option<Response>>>>;

/// What dispatching a request produced.
pub enum Dispatched {
    /// No response (a successful `acks = none` produce).
    Silent,
    /// The response, now.
    Ready(Response),
    /// The response, once the future resolves (`None`: no response after all).
    Later(Later),
    /// No response, but read nothing more from this client until the future
    /// resolves: backpressure when a partition's unwritten bytes pile up.
    Throttle(Pin<Box<dyn Future<Output = ()>>>),
}

/// Builds an error response. `range` fills the valid offset range of
/// OFFSET_OUT_OF_RANGE.
pub fn error_response(
    api: u16,
    code: ErrorCode,
    message: &str,
    range: Option<(u64, u64)>,
) -> Response {
    error_response_with(
        api,
        code,
        message,
        protocol::codec::ErrorDetails {
            range,
            ..Default::default()
        },
    )
}

fn error_response_with(
    api: u16,
    code: ErrorCode,
    message: &str,
    details: protocol::codec::ErrorDetails,
) -> Response {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::with_capacity(128 + message.len());
    let header = protocol::codec::error_response(&mut fbb, code, message, details).to_vec();
    Response {
        api,
        error: code as u16,
        header,
        payload: Payload::None,
    }
}

/// A handler's failure: the code and a message for humans.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The wire code.
    pub code: ErrorCode,
    /// What happened, in words.
    pub message: String,
    /// For OFFSET_OUT_OF_RANGE: the valid range.
    pub range: Option<(u64, u64)>,
    /// For NOT_OWNER: the broker that stores the partition.
    pub owner_broker_id: Option<BrokerId>,
}

impl Failure {
    /// A failure without an offset range.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            range: None,
            owner_broker_id: None,
        }
    }

    /// NOT_OWNER: another broker stores this partition.
    pub fn not_owner(topic: &str, partition: PartitionId, broker: BrokerId) -> Self {
        Failure {
            owner_broker_id: Some(broker),
            ..Failure::new(
                ErrorCode::NotOwner,
                format!("{topic}-{partition} is stored by broker {broker}, not this one: refresh metadata"),
            )
        }
    }

    /// The response that reports it.
    pub fn response(&self, api: u16) -> Response {
        error_response_with(
            api,
            self.code,
            &self.message,
            protocol::codec::ErrorDetails {
                range: self.range,
                owner_broker_id: self.owner_broker_id,
            },
        )
    }
}

impl From<StorageError> for Failure {
    fn from(error: StorageError) -> Self {
        match error {
            StorageError::OffsetOutOfRange {
                requested,
                start,
                end,
            } => Failure {
                code: ErrorCode::OffsetOutOfRange,
                message: format!(
                    "offset {requested} is outside the log; valid offsets are {start}..={end}"
                ),
                range: Some((start, end)),
                owner_broker_id: None,
            },
            StorageError::Unavailable { .. } => {
                Failure::new(ErrorCode::StorageUnavailable, error.to_string())
            }
            StorageError::Poisoned(_) | StorageError::Io { .. } => {
                Failure::new(ErrorCode::StorageFailed, error.to_string())
            }
        }
    }
}
