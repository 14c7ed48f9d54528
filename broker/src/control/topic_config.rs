//! A topic's settings changed while it runs (`ringlog topic alter T
//! --config retention.ms=…`, Kafka's `kafka-configs --alter`), as the
//! control thread does it.
//!
//! One compare-and-set rewrite of the topic's record, as for more
//! partitions: the overrides change, nothing else. Every broker applies
//! the record it sees ([`crate::mailbox::ShardMsg::TopicChanged`]): each
//! copy takes the new settings for its next segment roll, flush decision
//! and retention sweep; no data moves, nothing restarts. The answer waits
//! until every live broker has applied it (`served.rs`). A standalone
//! broker's registry is its topics file, rewritten durably.

use super::ControlPlane;
use crate::mailbox::ControlError;
use coordinator::registry::{Registry, ServedWait, TopicRecord};
use protocol::codec::topic_config::Alterable;
use protocol::ErrorCode;

/// Attempts at the rewrite that other rewrites keep beating.
const REWRITE_ATTEMPTS: usize = 8;

impl<R: Registry> ControlPlane<R> {
    /// Applies `changes` (0: back to the broker's default) to `name`'s
    /// overrides.
    pub(super) async fn alter_topic_config(
        &mut self,
        name: &str,
        changes: &[(Alterable, u64)],
    ) -> Result<(TopicRecord, Option<ServedWait>), ControlError> {
        for _ in 0..REWRITE_ATTEMPTS {
            let Some((record, revision)) = self.registry.topic(name).await? else {
                return Err(ControlError::new(
                    ErrorCode::UnknownTopic,
                    format!("no topic {name:?}"),
                ));
            };
            let next = self.altered(&record, changes)?;
            if next == record {
                return Ok((record, None));
            }
            let Some(written) = self.registry.replace_topic(next.clone(), revision).await? else {
                continue;
            };
            tracing::info!(
                topic = name,
                changes = ?changes.iter().map(|(s, v)| (s.name(), *v)).collect::<Vec<_>>(),
                "topic settings changed"
            );
            let wait = if self.apply_topic(next.clone()).await {
                self.wait_served(&next, written).await
            } else {
                None
            };
            return Ok((next, wait));
        }
        Err(ControlError::new(
            ErrorCode::CoordinatorUnavailable,
            format!("topic {name:?}'s record kept changing while its settings were changed: retry"),
        ))
    }

    /// `record` with `changes` applied, checked against what only the
    /// record knows (the replication factor).
    fn altered(
        &self,
        record: &TopicRecord,
        changes: &[(Alterable, u64)],
    ) -> Result<TopicRecord, ControlError> {
        let mut overrides = record.overrides();
        for (setting, value) in changes {
            setting.set(&mut overrides, *value);
        }
        let mut next = record.clone();
        next.retention_ms = overrides.retention_ms;
        next.retention_bytes = overrides.retention_bytes;
        next.segment_bytes = overrides.segment_bytes;
        next.flush_messages = overrides.flush_messages;
        next.flush_interval_ms = overrides.flush_interval_ms;
        let min_insync = changes
            .iter()
            .find(|(setting, _)| *setting == Alterable::MinInsyncReplicas);
        if let Some((_, value)) = min_insync {
            if !record.is_replicated() {
                return Err(ControlError::new(
                    ErrorCode::InvalidConfig,
                    format!(
                        "min.insync.replicas applies to replicated topics; {:?} has one copy of each partition",
                        record.name
                    ),
                ));
            }
            let factor = record.replicas.first().map_or(1, Vec::len) as u64;
            // A replicated record holds its value resolved: back to the
            // default is the broker's default, capped at the factor.
            let wanted = match *value {
                0 => u64::from(self.replication.default_min_insync).min(factor),
                n => n,
            };
            if wanted > factor {
                return Err(ControlError::new(
                    ErrorCode::InvalidConfig,
                    format!("min.insync.replicas={wanted} is more than {:?}'s replication factor {factor}", record.name),
                ));
            }
            next.min_insync_replicas = wanted as u32;
        }
        next.check()
            .map_err(|why| ControlError::new(ErrorCode::Internal, why.to_string()))?;
        Ok(next)
    }
}
