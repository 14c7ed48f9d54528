//! A mirror's copy promoted (`ringlog mirror promote T`, the datacenter
//! failover step) and an ordinary topic made a copy again (failback's
//! first step), as the control thread does them: one compare-and-set
//! rewrite of the topic's record each. Every broker applies the record it
//! sees ([`crate::mailbox::ShardMsg::TopicChanged`]).
//!
//! Promoting removes `mirror_source`: from then on the partitions take
//! ordinary produces and refuse mirror appends, keeping every byte and
//! offset the mirror copied, so consumers and groups go on at the offsets
//! they had in the source. The record keeps what the copy was and where
//! each partition's copy ended (`promoted_from`, `promoted_ends`): where
//! this cluster's history forks from the old source's, which a failback
//! cuts the old source back to.
//!
//! Making a copy sets `mirror_source` on an ordinary topic: from then on
//! it refuses ordinary produces (MIRRORED_PARTITION), so what it holds
//! stops changing while a failback saves and cuts its partitions.

use super::ControlPlane;
use crate::mailbox::ControlError;
use coordinator::registry::{Registry, TopicRecord};
use protocol::ErrorCode;

/// Attempts at a rewrite that other rewrites keep beating.
const REWRITE_ATTEMPTS: usize = 8;

impl<R: Registry> ControlPlane<R> {
    /// Ends mirroring of `name`, recording `ends` (where each partition's
    /// copy ends, by partition; empty: not known); returns what it was
    /// mirrored from.
    pub(super) async fn promote_mirror(
        &mut self,
        name: &str,
        ends: Vec<u64>,
    ) -> Result<String, ControlError> {
        self.rewrite(name, "promoted", |record| {
            let Some(source) = record.mirror_source.take() else {
                return Err(ControlError::new(
                    ErrorCode::InvalidRequest,
                    format!("topic {name:?} is not a mirror's target: nothing to promote"),
                ));
            };
            if !ends.is_empty() && ends.len() != record.partitions as usize {
                return Err(ControlError::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "{} ends given for topic {name:?}, which has {} partitions",
                        ends.len(),
                        record.partitions
                    ),
                ));
            }
            record.promoted_from = Some(source.clone());
            record.promoted_ends = ends.clone();
            Ok(source)
        })
        .await
        .inspect(|source| {
            tracing::info!(topic = name, %source, ?ends, "mirror promoted: the topic is writable");
        })
    }

    /// Makes the ordinary topic `name` (of id `topic_id`) a copy of
    /// `source`; answers what it records.
    pub(super) async fn make_mirror(
        &mut self,
        name: &str,
        source: &str,
        topic_id: &str,
    ) -> Result<String, ControlError> {
        self.rewrite(name, "made a mirror's copy", |record| {
            if record.id != topic_id {
                return Err(ControlError::new(
                    ErrorCode::UnknownTopicId,
                    format!(
                        "topic {name:?} is topic id {}, not {topic_id}: another topic of that name (deleted and created again?)",
                        record.id
                    ),
                ));
            }
            match &record.mirror_source {
                Some(recorded) if recorded == source => return Ok(source.to_string()),
                Some(recorded) => {
                    return Err(ControlError::new(
                        ErrorCode::MirroredPartition,
                        format!("topic {name:?} is a copy of {recorded:?} already, not of {source:?}"),
                    ))
                }
                None => {}
            }
            record.mirror_source = Some(source.to_string());
            record.promoted_from = None;
            record.promoted_ends = Vec::new();
            Ok(source.to_string())
        })
        .await
        .inspect(|_| {
            tracing::warn!(topic = name, %source, "made a mirror's copy: ordinary produces are refused from now on");
        })
    }

    /// Rewrites the record of `name` as `change` says (which may refuse),
    /// compare-and-set, again while other rewrites beat it; applies it
    /// here. A change that leaves the record as it was writes nothing.
    async fn rewrite<T>(
        &mut self,
        name: &str,
        what: &str,
        mut change: impl FnMut(&mut TopicRecord) -> Result<T, ControlError>,
    ) -> Result<T, ControlError> {
        for _ in 0..REWRITE_ATTEMPTS {
            let Some((record, revision)) = self.registry.topic(name).await? else {
                return Err(ControlError::new(
                    ErrorCode::UnknownTopic,
                    format!("no topic {name:?}"),
                ));
            };
            let mut next = record.clone();
            let answer = change(&mut next)?;
            if next == record {
                return Ok(answer);
            }
            if self
                .registry
                .replace_topic(next.clone(), revision)
                .await?
                .is_none()
            {
                continue;
            }
            self.apply_topic(next).await;
            return Ok(answer);
        }
        Err(ControlError::new(
            ErrorCode::CoordinatorUnavailable,
            format!("topic {name:?}'s record kept changing while it was {what}: retry"),
        ))
    }
}
