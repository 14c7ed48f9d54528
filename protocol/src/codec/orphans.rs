//! Orphaned data (api 30): what a broker keeps in `.orphaned/`, and the
//! purge of what is older than an age. Owned forms, builders, decoders.

use super::{finish, verify, DecodeError};
use crate::generated::ringlog::wire;
use crate::types::{BrokerId, PartitionId};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

/// One partition directory moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: PartitionId,
    /// The bytes of its files.
    pub bytes: u64,
    /// Why it was moved aside (empty: not recorded).
    pub why: String,
    /// When, in ms since the Unix epoch.
    pub moved_at_ms: u64,
    /// Its directory, relative to the data directory.
    pub path: String,
}

/// A broker's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Orphaned {
    /// The broker.
    pub broker_id: BrokerId,
    /// What is there now.
    pub orphans: Vec<Orphan>,
    /// What the request deleted.
    pub purged: Vec<Orphan>,
}

/// Orphaned request header: list, or purge those at least `older_than_ms`
/// old first.
pub fn orphaned_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    purge: bool,
    older_than_ms: u64,
) -> &'b [u8] {
    fbb.reset();
    let root = wire::OrphanedRequest::create(
        fbb,
        &wire::OrphanedRequestArgs {
            purge,
            older_than_ms,
        },
    );
    finish(fbb, root)
}

fn encode<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    orphans: &[Orphan],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<wire::OrphanInfo<'b>>>> {
    let items: Vec<_> = orphans
        .iter()
        .map(|o| {
            let topic = fbb.create_string(&o.topic);
            let why = fbb.create_string(&o.why);
            let path = fbb.create_string(&o.path);
            wire::OrphanInfo::create(
                fbb,
                &wire::OrphanInfoArgs {
                    topic: Some(topic),
                    partition: o.partition,
                    bytes: o.bytes,
                    why: Some(why),
                    moved_at_ms: o.moved_at_ms,
                    path: Some(path),
                },
            )
        })
        .collect();
    fbb.create_vector(&items)
}

/// Orphaned response header.
pub fn orphaned_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, answer: &Orphaned) -> &'b [u8] {
    fbb.reset();
    let orphans = encode(fbb, &answer.orphans);
    let purged = encode(fbb, &answer.purged);
    let root = wire::OrphanedResponse::create(
        fbb,
        &wire::OrphanedResponseArgs {
            broker_id: answer.broker_id,
            orphans: Some(orphans),
            purged: Some(purged),
        },
    );
    finish(fbb, root)
}

/// Reads an Orphaned answer.
pub fn decode_orphaned(header: &[u8]) -> Result<Orphaned, DecodeError> {
    let r = verify::<wire::OrphanedResponse>(header)?;
    let decode = |list: Option<
        flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<wire::OrphanInfo<'_>>>,
    >| {
        list.map(|l| {
            l.iter()
                .map(|o| Orphan {
                    topic: o.topic().unwrap_or_default().to_string(),
                    partition: o.partition(),
                    bytes: o.bytes(),
                    why: o.why().unwrap_or_default().to_string(),
                    moved_at_ms: o.moved_at_ms(),
                    path: o.path().unwrap_or_default().to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
    };
    Ok(Orphaned {
        broker_id: r.broker_id(),
        orphans: decode(r.orphans()),
        purged: decode(r.purged()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_as_written() {
        let answer = Orphaned {
            broker_id: 2,
            orphans: vec![Orphan {
                topic: "clicks".into(),
                partition: 1,
                bytes: 4096,
                why: "at start: …".into(),
                moved_at_ms: 1_765_000_000_000,
                path: ".orphaned/1-0/clicks-1".into(),
            }],
            purged: Vec::new(),
        };
        let mut fbb = FlatBufferBuilder::new();
        let bytes = orphaned_response(&mut fbb, &answer).to_vec();
        assert_eq!(decode_orphaned(&bytes).unwrap(), answer);
    }
}
