//! Operators' headers: leader elections (api 15) and reassignment (api 16)
//! of replicated partitions, and more partitions for a topic (api 18).
//! Owned forms, builders, decoders.

use super::{finish, verify, DecodeError};
use crate::generated::ringlog::wire;
use crate::types::{BrokerId, PartitionId};
use crate::ErrorCode;
use flatbuffers::FlatBufferBuilder;

/// What to elect.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElectLeaders {
    /// The topic.
    pub topic: String,
    /// Its partitions; empty: every one.
    pub partitions: Vec<PartitionId>,
    /// Elect the receiving broker although it is not in sync (an offline
    /// partition only).
    pub unclean: bool,
    /// Elect nothing; report.
    pub dry_run: bool,
}

/// One partition's election, as the broker answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elected {
    /// The partition.
    pub partition: PartitionId,
    /// `None`: done, asked for, or not needed; else why not.
    pub error: ErrorCode,
    /// What happened, in words.
    pub message: String,
    /// The leader after the election (or now; 0: none).
    pub leader: BrokerId,
    /// Its epoch (-1: unknown).
    pub leader_epoch: i32,
    /// Unclean: where the receiving broker's copy ends.
    pub end_offset: u64,
    /// Unclean: the high watermark that copy last learned.
    pub high_watermark: u64,
}

/// A reassignment's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassigned {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: PartitionId,
    /// Its copies while it moves (old and new).
    pub replicas: Vec<BrokerId>,
    /// The target; empty when there was nothing to move.
    pub moving_to: Vec<BrokerId>,
}

/// PromoteMirror request header: the topic, and where each partition's
/// copy ends (recorded with the promotion; empty: not recorded).
pub fn promote_mirror_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    ends: &[u64],
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let ends = (!ends.is_empty()).then(|| fbb.create_vector(ends));
    let root = wire::PromoteMirrorRequest::create(
        fbb,
        &wire::PromoteMirrorRequestArgs {
            topic: Some(topic),
            ends,
        },
    );
    finish(fbb, root)
}

/// PromoteMirror response header: the topic and what it was mirrored from.
pub fn promote_mirror_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    mirror_source: &str,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let mirror_source = fbb.create_string(mirror_source);
    let root = wire::PromoteMirrorResponse::create(
        fbb,
        &wire::PromoteMirrorResponseArgs {
            topic: Some(topic),
            mirror_source: Some(mirror_source),
        },
    );
    finish(fbb, root)
}

/// A CreatePartitions answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionsCreated {
    /// The topic.
    pub topic: String,
    /// Its partition count now.
    pub partitions: u32,
    /// The broker of each new partition (its preferred leader), from the
    /// first new one on; empty when there were that many already.
    pub brokers: Vec<BrokerId>,
}

/// CreatePartitions request header.
pub fn create_partitions_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partitions: u32,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let root = wire::CreatePartitionsRequest::create(
        fbb,
        &wire::CreatePartitionsRequestArgs {
            topic: Some(topic),
            partitions,
        },
    );
    finish(fbb, root)
}

/// CreatePartitions response header.
pub fn create_partitions_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    answer: &PartitionsCreated,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(&answer.topic);
    let brokers = fbb.create_vector(&answer.brokers);
    let root = wire::CreatePartitionsResponse::create(
        fbb,
        &wire::CreatePartitionsResponseArgs {
            topic: Some(topic),
            partitions: answer.partitions,
            brokers: Some(brokers),
        },
    );
    finish(fbb, root)
}

/// Decodes a CreatePartitions response header.
pub fn decode_partitions_created(header: &[u8]) -> Result<PartitionsCreated, DecodeError> {
    let r = verify::<wire::CreatePartitionsResponse>(header)?;
    Ok(PartitionsCreated {
        topic: r.topic().unwrap_or_default().to_string(),
        partitions: r.partitions(),
        brokers: r.brokers().map(|v| v.iter().collect()).unwrap_or_default(),
    })
}

/// ElectLeaders request header.
pub fn elect_leaders_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    request: &ElectLeaders,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(&request.topic);
    let partitions = fbb.create_vector(&request.partitions);
    let root = wire::ElectLeadersRequest::create(
        fbb,
        &wire::ElectLeadersRequestArgs {
            topic: Some(topic),
            partitions: Some(partitions),
            unclean: request.unclean,
            dry_run: request.dry_run,
        },
    );
    finish(fbb, root)
}

/// ElectLeaders response header.
pub fn elect_leaders_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    elected: &[Elected],
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let partitions: Vec<_> = elected
        .iter()
        .map(|e| {
            let message = fbb.create_string(&e.message);
            wire::ElectedPartition::create(
                fbb,
                &wire::ElectedPartitionArgs {
                    partition: e.partition,
                    error: e.error as u16,
                    message: Some(message),
                    leader: e.leader,
                    leader_epoch: e.leader_epoch,
                    end_offset: e.end_offset,
                    high_watermark: e.high_watermark,
                },
            )
        })
        .collect();
    let partitions = fbb.create_vector(&partitions);
    let root = wire::ElectLeadersResponse::create(
        fbb,
        &wire::ElectLeadersResponseArgs {
            topic: Some(topic),
            partitions: Some(partitions),
        },
    );
    finish(fbb, root)
}

/// Decodes an ElectLeaders response header.
pub fn decode_elect_leaders(header: &[u8]) -> Result<Vec<Elected>, DecodeError> {
    let response = verify::<wire::ElectLeadersResponse>(header)?;
    Ok(response
        .partitions()
        .map(|ps| {
            ps.iter()
                .map(|p| Elected {
                    partition: p.partition(),
                    error: ErrorCode::from_u16(p.error()).unwrap_or(ErrorCode::Internal),
                    message: p.message().unwrap_or_default().to_string(),
                    leader: p.leader(),
                    leader_epoch: p.leader_epoch(),
                    end_offset: p.end_offset(),
                    high_watermark: p.high_watermark(),
                })
                .collect()
        })
        .unwrap_or_default())
}

/// ReassignPartition request header.
pub fn reassign_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    replicas: &[BrokerId],
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let replicas = fbb.create_vector(replicas);
    let root = wire::ReassignPartitionRequest::create(
        fbb,
        &wire::ReassignPartitionRequestArgs {
            topic: Some(topic),
            partition,
            replicas: Some(replicas),
        },
    );
    finish(fbb, root)
}

/// ReassignPartition response header.
pub fn reassign_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, answer: &Reassigned) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(&answer.topic);
    let replicas = fbb.create_vector(&answer.replicas);
    let moving_to = fbb.create_vector(&answer.moving_to);
    let root = wire::ReassignPartitionResponse::create(
        fbb,
        &wire::ReassignPartitionResponseArgs {
            topic: Some(topic),
            partition: answer.partition,
            replicas: Some(replicas),
            moving_to: Some(moving_to),
        },
    );
    finish(fbb, root)
}

/// Decodes a ReassignPartition response header.
pub fn decode_reassign(header: &[u8]) -> Result<Reassigned, DecodeError> {
    let r = verify::<wire::ReassignPartitionResponse>(header)?;
    Ok(Reassigned {
        topic: r.topic().unwrap_or_default().to_string(),
        partition: r.partition(),
        replicas: r.replicas().map(|v| v.iter().collect()).unwrap_or_default(),
        moving_to: r
            .moving_to()
            .map(|v| v.iter().collect())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_partitions_round_trip() {
        let mut fbb = FlatBufferBuilder::new();
        let header = create_partitions_request(&mut fbb, "t", 8).to_vec();
        let request = verify::<wire::CreatePartitionsRequest>(&header).unwrap();
        assert_eq!((request.topic(), request.partitions()), (Some("t"), 8));
        let answer = PartitionsCreated {
            topic: "t".into(),
            partitions: 8,
            brokers: vec![1, 2, 3],
        };
        let header = create_partitions_response(&mut fbb, &answer).to_vec();
        assert_eq!(decode_partitions_created(&header).unwrap(), answer);
    }

    #[test]
    fn elections_and_reassignments_round_trip() {
        let mut fbb = FlatBufferBuilder::new();
        let elected = vec![
            Elected {
                partition: 2,
                error: ErrorCode::ElectionNotPossible,
                message: "broker 1 is not in sync".into(),
                leader: 3,
                leader_epoch: 7,
                end_offset: 0,
                high_watermark: 0,
            },
            Elected {
                partition: 0,
                error: ErrorCode::None,
                message: "unclean".into(),
                leader: 2,
                leader_epoch: 9,
                end_offset: 1_000,
                high_watermark: 1_200,
            },
        ];
        let bytes = elect_leaders_response(&mut fbb, "t", &elected).to_vec();
        assert_eq!(decode_elect_leaders(&bytes).unwrap(), elected);
        let request = ElectLeaders {
            topic: "t".into(),
            partitions: vec![0, 2],
            unclean: true,
            dry_run: true,
        };
        let bytes = elect_leaders_request(&mut fbb, &request).to_vec();
        let decoded = verify::<wire::ElectLeadersRequest>(&bytes).unwrap();
        assert_eq!(
            (
                decoded.unclean(),
                decoded.dry_run(),
                decoded.partitions().unwrap().len()
            ),
            (true, true, 2)
        );
        let answer = Reassigned {
            topic: "t".into(),
            partition: 1,
            replicas: vec![1, 2, 3],
            moving_to: vec![2, 3],
        };
        let bytes = reassign_response(&mut fbb, &answer).to_vec();
        assert_eq!(decode_reassign(&bytes).unwrap(), answer);
        assert!(decode_reassign(&[0xff; 5]).is_err());
        assert!(decode_elect_leaders(&[1, 2, 3]).is_err());
    }
}
