//! ElectLeaders and ReassignPartition: the operator's requests for
//! replicated partitions. Any shard takes them, checks the request alone,
//! and hands it to the control thread, which changes the registry (see
//! `control::leadership` and `control::reassign`). An unclean election
//! elects the broker that receives it.

use super::topics::ask_control;
use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::mailbox::ControlMsg;
use crate::shard::Shard;
use protocol::codec::operations::{self, ElectLeaders};
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::types::validate_topic_name;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Most partitions one ElectLeaders may list (a topic has at most as many).
const ELECT_PARTITIONS_MAX: usize = crate::limits::PARTITIONS_MAX as usize;

/// Most replicas a reassignment may name.
const REPLICAS_MAX: usize = 16;

/// Replicated partitions need a cluster.
fn check_clustered(shard: &Shard, what: &str) -> Result<(), Failure> {
    if shard.config.clustered() {
        return Ok(());
    }
    Err(Failure::new(
        ErrorCode::ClusterRequired,
        format!("{what} needs a cluster: this broker runs standalone, with one copy of every partition; start the brokers with --etcd"),
    ))
}

/// Handles an ElectLeaders request.
pub fn handle_elect(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let request = verify::<wire::ElectLeadersRequest>(header)
        .map_err(|e| invalid_header(Api::ElectLeaders, e))?;
    check_clustered(shard, "a leader election")?;
    let topic = request.topic().unwrap_or_default().to_string();
    validate_topic_name(&topic)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let partitions: Vec<u32> = request
        .partitions()
        .map(|ps| ps.iter().collect())
        .unwrap_or_default();
    if partitions.len() > ELECT_PARTITIONS_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!(
                "{} partitions listed, at most {ELECT_PARTITIONS_MAX}",
                partitions.len()
            ),
        ));
    }
    let elect = ElectLeaders {
        topic: topic.clone(),
        partitions,
        unclean: request.unclean(),
        dry_run: request.dry_run(),
    };
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::ElectLeaders {
        request: elect,
        reply,
    };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let api = Api::ElectLeaders as u16;
        let elected = match ask_control(&shard, msg, answer).await {
            Ok(elected) => elected,
            Err(error) => return Some(Failure::new(error.code, error.message).response(api)),
        };
        let header = super::with_builder(&shard, |fbb| {
            operations::elect_leaders_response(fbb, &topic, &elected).to_vec()
        });
        Some(Response {
            api,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}

/// Handles a ReassignPartition request.
pub fn handle_reassign(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let request = verify::<wire::ReassignPartitionRequest>(header)
        .map_err(|e| invalid_header(Api::ReassignPartition, e))?;
    check_clustered(shard, "moving a partition")?;
    let topic = request.topic().unwrap_or_default().to_string();
    validate_topic_name(&topic)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let replicas: Vec<u32> = request
        .replicas()
        .map(|r| r.iter().collect())
        .unwrap_or_default();
    if replicas.is_empty() || replicas.len() > REPLICAS_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidReplicas,
            format!(
                "a partition needs 1..={REPLICAS_MAX} replicas, got {}",
                replicas.len()
            ),
        ));
    }
    let partition = request.partition();
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::Reassign {
        topic,
        partition,
        replicas,
        reply,
    };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let api = Api::ReassignPartition as u16;
        let reassigned = match ask_control(&shard, msg, answer).await {
            Ok(reassigned) => reassigned,
            Err(error) => return Some(Failure::new(error.code, error.message).response(api)),
        };
        let header = super::with_builder(&shard, |fbb| {
            operations::reassign_response(fbb, &reassigned).to_vec()
        });
        Some(Response {
            api,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}
