//! More partitions for a topic (`ringlog topic alter T --partitions N`,
//! Kafka's CreatePartitions), as the control thread does it.
//!
//! One compare-and-set rewrite of the topic's record: the count goes up and
//! the new partitions get brokers (with the topic's replication factor,
//! spread over the live brokers and their racks as at creation). Every
//! broker applies the record it sees ([`crate::mailbox::ShardMsg::TopicChanged`]):
//! shards open their new partitions empty, Metadata lists them, and group
//! members see the topic's new count in their next view and rebalance onto
//! them. The existing partitions, their data and offsets are untouched. The
//! count never goes down: a partition's messages have nowhere to go.

use super::ControlPlane;
use crate::mailbox::ControlError;
use coordinator::placement;
use coordinator::registry::{Registry, ServedWait, TopicRecord};
use protocol::codec::operations::PartitionsCreated;
use protocol::types::BrokerId;
use protocol::ErrorCode;

/// Attempts at the rewrite that other rewrites keep beating.
const REWRITE_ATTEMPTS: usize = 8;

impl<R: Registry> ControlPlane<R> {
    /// Raises `name`'s partition count to `partitions`.
    pub(super) async fn create_partitions(
        &mut self,
        name: &str,
        partitions: u32,
    ) -> Result<(PartitionsCreated, Option<ServedWait>), ControlError> {
        let live = self.registry.brokers().await?;
        let placeable: Vec<placement::Placeable> = live
            .iter()
            .map(|b| placement::Placeable {
                id: b.broker_id,
                rack: b.rack.clone(),
            })
            .collect();
        for _ in 0..REWRITE_ATTEMPTS {
            let Some((record, revision)) = self.registry.topic(name).await? else {
                return Err(ControlError::new(
                    ErrorCode::UnknownTopic,
                    format!("no topic {name:?}"),
                ));
            };
            if partitions < record.partitions {
                return Err(ControlError::new(
                    ErrorCode::InvalidConfig,
                    format!(
                        "topic {name:?} has {} partitions: a partition count only goes up (a partition's messages would have nowhere to go)",
                        record.partitions
                    ),
                ));
            }
            if partitions == record.partitions {
                let answer = PartitionsCreated {
                    topic: name.to_string(),
                    partitions,
                    brokers: Vec::new(),
                };
                return Ok((answer, None));
            }
            let mut next = grown(&record, partitions, &placeable)?;
            next.record_disks(record.partitions, &live);
            let Some(written) = self.registry.replace_topic(next.clone(), revision).await? else {
                continue;
            };
            let brokers: Vec<BrokerId> = (record.partitions..partitions)
                .filter_map(|p| next.broker_of(p))
                .collect();
            tracing::info!(
                topic = name,
                from = record.partitions,
                to = partitions,
                ?brokers,
                "topic partitions added"
            );
            let wait = if self.apply_topic(next.clone()).await {
                self.wait_served(&next, written).await
            } else {
                None
            };
            let answer = PartitionsCreated {
                topic: name.to_string(),
                partitions,
                brokers,
            };
            return Ok((answer, wait));
        }
        Err(ControlError::new(
            ErrorCode::CoordinatorUnavailable,
            format!("topic {name:?}'s record kept changing while partitions were added: retry"),
        ))
    }
}

/// `record` with `partitions` partitions: the new ones placed as a topic
/// of that many would place them, the existing ones as they are.
fn grown(
    record: &TopicRecord,
    partitions: u32,
    live: &[placement::Placeable],
) -> Result<TopicRecord, ControlError> {
    let old = record.partitions as usize;
    let mut next = record.clone();
    next.partitions = partitions;
    if record.is_replicated() {
        let factor = record.replicas.first().map_or(1, Vec::len) as u32;
        let Some(replicas) = placement::assign(&record.name, partitions, factor, live) else {
            return Err(ControlError::new(
                ErrorCode::InvalidConfig,
                format!(
                    "replication factor {factor} needs {factor} live brokers for the new partitions; {} are live",
                    live.len()
                ),
            ));
        };
        for set in replicas.into_iter().skip(old) {
            next.brokers.push(set[0]);
            next.replicas.push(set);
        }
    } else {
        let ids: Vec<BrokerId> = live.iter().map(|b| b.id).collect();
        let owners = placement::spread(&record.name, partitions, &ids);
        if owners.len() != partitions as usize {
            return Err(ControlError::new(
                ErrorCode::Internal,
                "no live broker to place the new partitions on",
            ));
        }
        next.brokers.extend(owners.into_iter().skip(old));
    }
    next.check()
        .map_err(|why| ControlError::new(ErrorCode::Internal, why.to_string()))?;
    Ok(next)
}
