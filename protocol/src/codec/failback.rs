//! Failback's headers (apis 28, 29): an ordinary topic made a mirror's
//! copy again (MakeMirror), and a copy's partition cut where the source's
//! history forked from it (TruncateMirror). Builders and decoders.

use super::{finish, verify, DecodeError};
use crate::generated::ringlog::wire;
use crate::types::PartitionId;
use flatbuffers::FlatBufferBuilder;

/// MakeMirror request header: `topic` (whose id must be `topic_id`)
/// records `mirror_source` and refuses ordinary produces from then on.
pub fn make_mirror_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    mirror_source: &str,
    topic_id: &str,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let mirror_source = fbb.create_string(mirror_source);
    let topic_id = fbb.create_string(topic_id);
    let root = wire::MakeMirrorRequest::create(
        fbb,
        &wire::MakeMirrorRequestArgs {
            topic: Some(topic),
            mirror_source: Some(mirror_source),
            topic_id: Some(topic_id),
        },
    );
    finish(fbb, root)
}

/// MakeMirror response header.
pub fn make_mirror_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    mirror_source: &str,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let mirror_source = fbb.create_string(mirror_source);
    let root = wire::MakeMirrorResponse::create(
        fbb,
        &wire::MakeMirrorResponseArgs {
            topic: Some(topic),
            mirror_source: Some(mirror_source),
        },
    );
    finish(fbb, root)
}

/// A cut to make: `topic`-`partition` at `offset`, on a copy recording
/// `mirror_source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: PartitionId,
    /// Where the log is to end.
    pub offset: u64,
    /// What the copy must record.
    pub mirror_source: String,
    /// Where the log must end (the caller saved the bytes up to there).
    pub expected_end: u64,
}

/// How a cut ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutDone {
    /// Where the log ends now.
    pub end_offset: u64,
    /// The bytes cut.
    pub bytes_cut: u64,
    /// The leader epoch now (0 for one copy).
    pub leader_epoch: u32,
}

/// TruncateMirror request header.
pub fn truncate_mirror_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, cut: &Cut) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(&cut.topic);
    let mirror_source = fbb.create_string(&cut.mirror_source);
    let root = wire::TruncateMirrorRequest::create(
        fbb,
        &wire::TruncateMirrorRequestArgs {
            topic: Some(topic),
            partition: cut.partition,
            offset: cut.offset,
            mirror_source: Some(mirror_source),
            expected_end: cut.expected_end,
        },
    );
    finish(fbb, root)
}

/// TruncateMirror response header.
pub fn truncate_mirror_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    done: CutDone,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let root = wire::TruncateMirrorResponse::create(
        fbb,
        &wire::TruncateMirrorResponseArgs {
            topic: Some(topic),
            partition,
            end_offset: done.end_offset,
            bytes_cut: done.bytes_cut,
            leader_epoch: done.leader_epoch,
        },
    );
    finish(fbb, root)
}

/// Reads a TruncateMirror answer.
pub fn decode_cut_done(header: &[u8]) -> Result<CutDone, DecodeError> {
    let r = verify::<wire::TruncateMirrorResponse>(header)?;
    Ok(CutDone {
        end_offset: r.end_offset(),
        bytes_cut: r.bytes_cut(),
        leader_epoch: r.leader_epoch(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_and_its_answer_read_back_as_written() {
        let cut = Cut {
            topic: "clicks".into(),
            partition: 2,
            offset: 4096,
            mirror_source: "dc2/clicks (cluster 7, topic id 8)".into(),
            expected_end: 5000,
        };
        let mut fbb = FlatBufferBuilder::new();
        let bytes = truncate_mirror_request(&mut fbb, &cut).to_vec();
        let r = verify::<wire::TruncateMirrorRequest>(&bytes).unwrap();
        assert_eq!(r.topic(), Some("clicks"));
        assert_eq!(
            (r.partition(), r.offset(), r.expected_end()),
            (2, 4096, 5000)
        );
        assert_eq!(r.mirror_source(), Some(cut.mirror_source.as_str()));
        let done = CutDone {
            end_offset: 4096,
            bytes_cut: 900,
            leader_epoch: 6,
        };
        let bytes = truncate_mirror_response(&mut fbb, "clicks", 2, done).to_vec();
        assert_eq!(decode_cut_done(&bytes).unwrap(), done);
    }
}
