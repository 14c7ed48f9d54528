//! Promoting a mirror's target topic (`ringlog mirror promote T`, the
//! datacenter failover step), as the control thread does it: one
//! compare-and-set rewrite of the topic's record without its
//! `mirror_source`. Every broker applies the record it sees
//! ([`crate::mailbox::ShardMsg::TopicChanged`]): from then on its
//! partitions take ordinary produces and refuse mirror appends, keeping
//! every byte and offset the mirror copied, so consumers and groups go on
//! at the offsets they had in the source.

use super::ControlPlane;
use crate::mailbox::ControlError;
use coordinator::registry::Registry;
use protocol::ErrorCode;

/// Attempts at the rewrite that other rewrites keep beating.
const REWRITE_ATTEMPTS: usize = 8;

impl<R: Registry> ControlPlane<R> {
    /// Ends mirroring of `name`; returns what it was mirrored from.
    pub(super) async fn promote_mirror(&mut self, name: &str) -> Result<String, ControlError> {
        for _ in 0..REWRITE_ATTEMPTS {
            let Some((record, revision)) = self.registry.topic(name).await? else {
                return Err(ControlError::new(
                    ErrorCode::UnknownTopic,
                    format!("no topic {name:?}"),
                ));
            };
            let Some(source) = record.mirror_source.clone() else {
                return Err(ControlError::new(
                    ErrorCode::InvalidRequest,
                    format!("topic {name:?} is not a mirror's target: nothing to promote"),
                ));
            };
            let mut next = record;
            next.mirror_source = None;
            if !self.registry.replace_topic(next.clone(), revision).await? {
                continue;
            }
            tracing::info!(topic = name, %source, "mirror promoted: the topic is writable");
            self.apply_topic(next).await;
            return Ok(source);
        }
        Err(ControlError::new(
            ErrorCode::CoordinatorUnavailable,
            format!("topic {name:?}'s record kept changing while it was promoted: retry"),
        ))
    }
}
