//! Failback (issue 45, item 4): the datacenter that comes back makes its
//! topic a mirror's copy of the promoted one (MakeMirror) and cuts each
//! partition where the promoted copy's history forked from its own
//! (TruncateMirror); the mirror then copies what was written since, so
//! the two logs end byte for byte the same. The cut of a replicated
//! partition is its leader's, in a new epoch (`replica/cut.rs`).

use super::forward::forward;
use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::mailbox::ControlMsg;
use crate::replica::cut::{cut_leader, Cut, CutError};
use crate::shard::{Owner, Shard};
use crate::storage::partition_log;
use protocol::codec::failback::CutDone;
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::types::PartitionId;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Handles a MakeMirror request: the control thread rewrites the topic's
/// record; answered once the registry holds it and this broker applied it.
pub fn handle_make(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let api = Api::MakeMirror;
    let request = verify::<wire::MakeMirrorRequest>(header).map_err(|e| invalid_header(api, e))?;
    let name = request.topic().unwrap_or_default().to_string();
    protocol::types::validate_topic_name(&name)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let source = super::topics::mirror_source(request.mirror_source().unwrap_or_default())?;
    let topic_id = request.topic_id().unwrap_or_default().to_string();
    if topic_id.is_empty() {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "MakeMirror names the topic's id: the topic the other cluster's copy came from",
        ));
    }
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::MakeMirror {
        name: name.clone(),
        source,
        topic_id,
        reply,
    };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let recorded = match super::topics::ask_control(&shard, msg, answer).await {
            Ok(recorded) => recorded,
            Err(error) => {
                return Some(Failure::new(error.code, error.message).response(api as u16))
            }
        };
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::failback::make_mirror_response(fbb, &name, &recorded).to_vec()
        });
        Some(Response {
            api: api as u16,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}

/// Handles a TruncateMirror request on the shard that holds the
/// partition's copy (its leader's, when replicated).
pub fn handle_truncate(
    shard: &Rc<Shard>,
    request_id: u32,
    header: &[u8],
) -> Result<Dispatched, Failure> {
    let api = Api::TruncateMirror;
    let request =
        verify::<wire::TruncateMirrorRequest>(header).map_err(|e| invalid_header(api, e))?;
    let topic = request.topic().unwrap_or_default().to_string();
    let partition = request.partition();
    let log = match super::locate(shard, &topic, partition)? {
        Owner::Here(log) => log,
        Owner::Shard(owner) => return forward(shard, owner, api as u16, request_id, header, &[]),
        Owner::Broker(broker) => return Err(Failure::not_owner(&topic, partition, broker)),
    };
    check_copy(
        shard,
        &topic,
        partition,
        request.mirror_source().unwrap_or_default(),
    )?;
    let replica = shard.replica(&topic, partition);
    if let Some(replica) = &replica {
        super::replicated::check_leader(replica, -1)?;
    }
    let (offset, expected_end) = (request.offset(), request.expected_end());
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let label = format!("{topic}-{partition}");
        let done = cut_here(&shard, &log, replica.as_ref(), &label, offset, expected_end).await;
        Some(match done {
            Ok(done) => {
                let header = super::with_builder(&shard, |fbb| {
                    protocol::codec::failback::truncate_mirror_response(
                        fbb, &topic, partition, done,
                    )
                    .to_vec()
                });
                Response {
                    api: api as u16,
                    error: 0,
                    header,
                    payload: Payload::None,
                }
            }
            Err(failure) => failure.response(api as u16),
        })
    })))
}

/// The cut on this shard: checked against the end the client saw, then
/// the leader's (replicated) or the only copy's.
async fn cut_here(
    shard: &Rc<Shard>,
    log: &crate::storage::SharedLog,
    replica: Option<&crate::replica::SharedReplica>,
    label: &str,
    offset: u64,
    expected_end: u64,
) -> Result<CutDone, Failure> {
    let (start, end) = {
        let l = log.borrow();
        (l.start_offset(), l.end_offset())
    };
    if end != expected_end || offset < start {
        return Err(Failure {
            range: Some((start, end)),
            ..Failure::new(
                ErrorCode::OffsetOutOfRange,
                format!("{label} holds {start}..{end}: not cut at {offset} for a client that saw it end at {expected_end} (save what it holds past the cut, then ask again)"),
            )
        });
    }
    if let Some(replica) = replica {
        return cut_replicated(shard, replica, label, offset).await;
    }
    if offset < end {
        partition_log::truncate(log, offset).await?;
        tracing::warn!(partition = %label, offset, bytes_cut = end - offset, "failback: the log is cut where the other cluster's history forked");
    }
    Ok(CutDone {
        end_offset: log.borrow().end_offset(),
        bytes_cut: end.saturating_sub(offset),
        leader_epoch: 0,
    })
}

/// The topic here must be a copy of `source`: not yet (the record has not
/// reached this broker) is retriable, another source is not.
fn check_copy(
    shard: &Shard,
    topic: &str,
    partition: PartitionId,
    source: &str,
) -> Result<(), Failure> {
    let recorded = shard
        .topic(topic)
        .and_then(|t| t.borrow().mirror_source.clone());
    match recorded {
        Some(recorded) if recorded == source => Ok(()),
        Some(recorded) => Err(Failure::new(
            ErrorCode::MirroredPartition,
            format!("{topic}-{partition} is a copy of {recorded:?}, not of {source:?}: not cut"),
        )),
        None => Err(Failure::new(
            ErrorCode::CoordinatorUnavailable,
            format!("{topic}-{partition} is not a mirror's copy on this broker (yet): make it one (MakeMirror) and retry"),
        )),
    }
}

/// The leader's cut and its new epoch, proposed through the registry.
async fn cut_replicated(
    shard: &Rc<Shard>,
    replica: &crate::replica::SharedReplica,
    label: &str,
    offset: u64,
) -> Result<CutDone, Failure> {
    let refused = |code, message: String| Failure::new(code, format!("{label}: {message}"));
    let bytes = match cut_leader(replica, offset).await {
        Ok(Cut::Done) => 0,
        Ok(Cut::Cut { bytes, next }) => {
            let epoch = next.leader_epoch;
            crate::replica::tasks::propose(shard, replica, next).await;
            let r = replica.borrow();
            if !(r.leads() && r.epoch() == epoch) {
                return Err(refused(
                    ErrorCode::CoordinatorUnavailable,
                    format!("cut at {offset}, but its new leader epoch {epoch} was not taken (the partition is in epoch {}, led by broker {}): retry", r.epoch(), r.leader()),
                ));
            }
            bytes
        }
        Err(CutError::NotLeading) => {
            let leader = replica.borrow().leader();
            return Err(super::replicated::not_leader(
                &replica.borrow().topic,
                replica.borrow().partition,
                leader,
            ));
        }
        Err(error @ CutError::BelowStart { .. }) => {
            return Err(refused(ErrorCode::OffsetOutOfRange, error.to_string()))
        }
        Err(error @ CutError::Storage(_)) => {
            return Err(refused(ErrorCode::StorageFailed, error.to_string()))
        }
    };
    let r = replica.borrow();
    let end_offset = r.log.borrow().end_offset();
    Ok(CutDone {
        end_offset,
        bytes_cut: bytes,
        leader_epoch: r.epoch(),
    })
}
