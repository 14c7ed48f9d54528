//! Length-prefixed frames.
//!
//! ```text
//! request:  u32 frame_len | u16 api | u16 api_version | u32 request_id | u32 header_len | header | payload
//! response: u32 frame_len | u16 api | u16 error_code  | u32 request_id | u32 header_len | header | payload
//! throttled response (asked for in the Handshake):
//!           u32 frame_len | u16 api | u16 error_code  | u32 request_id | u32 header_len | u32 throttle_ms | header | payload
//! ```
//!
//! All integers are little-endian. `frame_len` counts the bytes after itself
//! (12 + header_len + payload_len). `header` is a flatbuffer whose root table is
//! fixed by the api; `payload` is raw log bytes (a Produce request's message set,
//! a Fetch response's chunk) and is empty elsewhere. Decoding never panics.

/// Bytes before the flatbuffer header, in both directions.
pub const FRAME_PREFIX_BYTES: usize = 16;
/// Bytes of a throttled response's `throttle_ms`, right after the prefix.
pub const THROTTLE_BYTES: usize = 4;
/// The largest frame (including the 4-byte length) a peer may send.
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The protocol version spoken by this crate (exchanged in the handshake).
pub const PROTOCOL_VERSION: u16 = 1;
/// The only api version defined so far, for every api.
pub const API_VERSION: u16 = 0;

/// The request types. The numbers are part of the wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Api {
    /// Version handshake; must be the first request on a connection.
    Handshake = 0,
    /// Brokers, shard ports, topics and partition placement.
    Metadata = 1,
    /// Create a topic.
    CreateTopic = 2,
    /// Delete a topic and its data.
    DeleteTopic = 3,
    /// Append a message set to one partition.
    Produce = 4,
    /// Read a chunk of one partition's log.
    Fetch = 5,
    /// Earliest / latest / before-a-time offsets of one partition.
    ListOffsets = 6,
    /// Join a consumer group (cluster only).
    JoinGroup = 7,
    /// Keep a member's session alive; long-poll for the group's view.
    Heartbeat = 8,
    /// Claim partitions for a member.
    ClaimPartitions = 9,
    /// Release a member's partitions.
    ReleasePartitions = 10,
    /// Commit (or, for an empty group, reset) offsets.
    CommitOffsets = 11,
    /// Leave a consumer group.
    LeaveGroup = 12,
    /// A group's members, owners and committed offsets.
    DescribeGroup = 13,
    /// Every consumer group.
    ListGroups = 14,
    /// Preferred or unclean leader elections of replicated partitions.
    ElectLeaders = 15,
    /// Move a partition's copies to other brokers.
    ReassignPartition = 16,
    /// Read chunks of many partitions of one shard in one request.
    MultiFetch = 17,
    /// Raise a topic's partition count.
    CreatePartitions = 18,
    /// End mirroring of a mirror's target topic: it becomes writable.
    PromoteMirror = 19,
    /// The rest of a login begun in the Handshake (SCRAM's final messages).
    Authenticate = 20,
    /// Add access control rules.
    CreateAcls = 21,
    /// Remove access control rules.
    DeleteAcls = 22,
    /// List access control rules.
    DescribeAcls = 23,
    /// Add, replace or remove users' login credentials.
    AlterUsers = 24,
    /// List the users that may log in.
    ListUsers = 25,
    /// An idempotent producer's id and epoch.
    InitProducerId = 26,
    /// Digests of a copy's bytes (`ringlog verify`).
    Digest = 27,
    /// Make an ordinary topic a mirror's copy again (failback).
    MakeMirror = 28,
    /// Cut a mirror's copy of a partition where its source forked (failback).
    TruncateMirror = 29,
    /// What a broker keeps in `.orphaned/`; purge what is old.
    Orphaned = 30,
    /// Change a topic's settings while it runs.
    AlterTopicConfig = 31,
    /// Set or delete principals' quotas at run time.
    AlterQuotas = 32,
    /// The quotas set at run time and the broker's configured ones.
    DescribeQuotas = 33,
}

impl Api {
    /// The api for a wire number.
    pub fn from_u16(value: u16) -> Option<Api> {
        Some(match value {
            0 => Api::Handshake,
            1 => Api::Metadata,
            2 => Api::CreateTopic,
            3 => Api::DeleteTopic,
            4 => Api::Produce,
            5 => Api::Fetch,
            6 => Api::ListOffsets,
            7 => Api::JoinGroup,
            8 => Api::Heartbeat,
            9 => Api::ClaimPartitions,
            10 => Api::ReleasePartitions,
            11 => Api::CommitOffsets,
            12 => Api::LeaveGroup,
            13 => Api::DescribeGroup,
            14 => Api::ListGroups,
            15 => Api::ElectLeaders,
            16 => Api::ReassignPartition,
            17 => Api::MultiFetch,
            18 => Api::CreatePartitions,
            19 => Api::PromoteMirror,
            20 => Api::Authenticate,
            21 => Api::CreateAcls,
            22 => Api::DeleteAcls,
            23 => Api::DescribeAcls,
            24 => Api::AlterUsers,
            25 => Api::ListUsers,
            26 => Api::InitProducerId,
            27 => Api::Digest,
            28 => Api::MakeMirror,
            29 => Api::TruncateMirror,
            30 => Api::Orphaned,
            31 => Api::AlterTopicConfig,
            32 => Api::AlterQuotas,
            33 => Api::DescribeQuotas,
            _ => return None,
        })
    }
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix exceeds the limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Declared frame size (including the length prefix).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The length prefix is too small to hold the fixed fields, or the header
    /// length points past the frame.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

/// The fixed fields at the start of every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramePrefix {
    /// Total frame size including the 4-byte length prefix.
    pub frame_bytes: usize,
    /// Api key.
    pub api: u16,
    /// Requests: the api version. Responses: the error code.
    pub version_or_error: u16,
    /// Chosen by the client, echoed by the broker.
    pub request_id: u32,
    /// Size of the flatbuffer header that follows.
    pub header_len: usize,
}

impl FramePrefix {
    /// Size of the payload after the header.
    pub fn payload_len(&self) -> usize {
        self.frame_bytes - FRAME_PREFIX_BYTES - self.header_len
    }

    /// A throttled response's payload size (its `throttle_ms` lies between
    /// the prefix and the header); `None` when the frame is too short to
    /// hold it.
    pub fn throttled_payload_len(&self) -> Option<usize> {
        self.payload_len().checked_sub(THROTTLE_BYTES)
    }

    /// Parses the first [`FRAME_PREFIX_BYTES`] of a frame. `max` bounds the
    /// declared frame size so a hostile length cannot make the reader allocate.
    pub fn parse(bytes: &[u8; FRAME_PREFIX_BYTES], max: usize) -> Result<Self, FrameError> {
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let frame_bytes = u32_at(0) as usize + 4;
        if frame_bytes > max {
            return Err(FrameError::TooLarge {
                len: frame_bytes,
                max,
            });
        }
        if frame_bytes < FRAME_PREFIX_BYTES {
            return Err(FrameError::Malformed(
                "length shorter than the fixed fields",
            ));
        }
        let header_len = u32_at(12) as usize;
        if header_len > frame_bytes - FRAME_PREFIX_BYTES {
            return Err(FrameError::Malformed("header length runs past the frame"));
        }
        Ok(FramePrefix {
            frame_bytes,
            api: u16_at(4),
            version_or_error: u16_at(6),
            request_id: u32_at(8),
            header_len,
        })
    }
}

/// Writes a frame prefix for a header and payload of the given sizes.
pub fn write_prefix(
    out: &mut Vec<u8>,
    api: u16,
    version_or_error: u16,
    request_id: u32,
    header_len: usize,
    payload_len: usize,
) {
    let frame_len = (FRAME_PREFIX_BYTES - 4 + header_len + payload_len) as u32;
    out.extend_from_slice(&frame_len.to_le_bytes());
    out.extend_from_slice(&api.to_le_bytes());
    out.extend_from_slice(&version_or_error.to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&(header_len as u32).to_le_bytes());
}

/// Writes a throttled response's prefix: the prefix, then `throttle_ms`,
/// which `frame_len` counts.
pub fn write_throttled_prefix(
    out: &mut Vec<u8>,
    api: u16,
    error: u16,
    request_id: u32,
    header_len: usize,
    payload_len: usize,
    throttle_ms: u32,
) {
    write_prefix(
        out,
        api,
        error,
        request_id,
        header_len,
        THROTTLE_BYTES + payload_len,
    );
    out.extend_from_slice(&throttle_ms.to_le_bytes());
}

/// Appends a whole frame: prefix, header, payload.
pub fn write_frame(
    out: &mut Vec<u8>,
    api: u16,
    version_or_error: u16,
    request_id: u32,
    header: &[u8],
    payload: &[u8],
) {
    write_prefix(
        out,
        api,
        version_or_error,
        request_id,
        header.len(),
        payload.len(),
    );
    out.extend_from_slice(header);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttled_response_counts_its_throttle_time_in_its_length() {
        let mut out = Vec::new();
        write_throttled_prefix(&mut out, 1, 0, 9, 4, 3, 250);
        out.extend_from_slice(b"headpay");
        let prefix = FramePrefix::parse(out[..16].try_into().unwrap(), FRAME_BYTES_MAX).unwrap();
        assert_eq!(prefix.frame_bytes, out.len());
        assert_eq!(prefix.throttled_payload_len(), Some(3));
        assert_eq!(u32::from_le_bytes(out[16..20].try_into().unwrap()), 250);
        // Too short to hold a throttle time: not read as one.
        let mut short = Vec::new();
        write_frame(&mut short, 1, 0, 9, b"head", b"");
        let prefix = FramePrefix::parse(short[..16].try_into().unwrap(), FRAME_BYTES_MAX).unwrap();
        assert_eq!(prefix.throttled_payload_len(), None);
    }

    #[test]
    fn frames_round_trip() {
        let mut out = Vec::new();
        write_frame(&mut out, 4, 0, 77, b"head", b"payload!");
        let prefix = FramePrefix::parse(out[..16].try_into().unwrap(), FRAME_BYTES_MAX).unwrap();
        assert_eq!(prefix.frame_bytes, out.len());
        assert_eq!(prefix.api, 4);
        assert_eq!(prefix.request_id, 77);
        assert_eq!(prefix.header_len, 4);
        assert_eq!(prefix.payload_len(), 8);
    }

    #[test]
    fn hostile_prefixes_are_rejected() {
        let mut big = [0u8; 16];
        big[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            FramePrefix::parse(&big, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        let mut short = [0u8; 16];
        short[..4].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            FramePrefix::parse(&short, 1024),
            Err(FrameError::Malformed(_))
        ));
        let mut header_past_end = [0u8; 16];
        header_past_end[..4].copy_from_slice(&12u32.to_le_bytes());
        header_past_end[12..].copy_from_slice(&1u32.to_le_bytes());
        assert!(matches!(
            FramePrefix::parse(&header_past_end, 1024),
            Err(FrameError::Malformed(_))
        ));
    }
}
