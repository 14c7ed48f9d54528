//! Answering a topic change once the cluster serves it.
//!
//! A CreateTopic used to be answered as soon as this broker's shards had
//! opened the topic; the other brokers learned it from etcd's watch a few
//! milliseconds later, and a producer that went straight to the owning
//! broker could meet NOT_OWNER (issue 46, item 4). Now every broker, after
//! applying a topic's record from the watch, writes the record's revision
//! under `served/<topic-id>/<broker>` ([`Registry::mark_served`]), and the
//! broker that made the change — CreateTopic, CreatePartitions, a
//! reassignment, a settings change — answers only once every live broker's
//! mark is at its revision or later ([`Registry::served_waiter`]).
//!
//! Every live broker, not only those holding copies: any of them answers
//! Metadata, and a client's first Metadata after the answer must list the
//! topic. A broker that dies meanwhile leaves the live set when its lease
//! expires, so the wait is bounded by the lease's TTL plus one etcd
//! timeout, and by 15 s ([`crate::limits::SERVED_WAIT_MAX`]) — under the
//! clients' 30 s request timeout however long the lease
//! ([`ControlPlane::served_timeout`]); a broker that is live but
//! cannot reach etcd makes the answer NOT_YET_SERVED, naming it, once that
//! time is up. The wait runs as a task of its own: the control loop goes on
//! applying changes (its own watch events among them) while it waits.

use super::ControlPlane;
use crate::mailbox::ControlError;
use coordinator::registry::{Registry, ServedWait, TopicRecord};

impl<R: Registry> ControlPlane<R> {
    /// Records that this broker serves `record` as of `revision`, and
    /// returns the wait for every live broker to do the same (`None`: a
    /// single broker, or the mark could not be written — then the change
    /// is answered at once, as before).
    pub(super) async fn wait_served(
        &mut self,
        record: &TopicRecord,
        revision: i64,
    ) -> Option<ServedWait> {
        if !self
            .mark_served(&[(record.name.clone(), record.id.clone())], revision)
            .await
        {
            return None;
        }
        self.registry
            .served_waiter(&record.id, revision, self.served_timeout)
    }

    /// Says in the registry that this broker serves `topics` as of
    /// `revision`; false (logged) when etcd did not take it.
    pub(super) async fn mark_served(&mut self, topics: &[(String, String)], revision: i64) -> bool {
        if topics.is_empty() {
            return true;
        }
        match self.registry.mark_served(topics, revision).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, revision, topics = topics.len(), "recording the topic records this broker applied (a change waiting for it ends at its timeout)");
                false
            }
        }
    }
}

/// Sends `result` on `reply` — after `wait`, when there is one, in a task
/// of its own; a wait that ends unserved answers its error instead.
pub(super) async fn answer_when_served<T: Send + 'static>(
    result: Result<(T, Option<ServedWait>), ControlError>,
    reply: flume::Sender<Result<T, ControlError>>,
) {
    match result {
        Ok((answer, Some(wait))) => {
            tokio::spawn(async move {
                let result = wait.await.map(|()| answer).map_err(ControlError::from);
                let _ = reply.send_async(result).await;
            });
        }
        Ok((answer, None)) => {
            let _ = reply.send_async(Ok(answer)).await;
        }
        Err(error) => {
            let _ = reply.send_async(Err(error)).await;
        }
    }
}
