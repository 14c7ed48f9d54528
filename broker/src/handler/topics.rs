//! CreateTopic, DeleteTopic and CreatePartitions.
//!
//! Any shard takes these requests, checks what it can alone (the name, the
//! partition count, the settings against the broker's limits), and hands the
//! change to the control thread ([`crate::control`]), which owns the topic
//! registry, serialises every change, and has every shard open or drop its
//! partitions before it answers. The handler awaits that answer on a
//! channel; the shard's reactor never waits on the registry's fsync.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::mailbox::{ControlError, ControlMsg};
use crate::shard::Shard;
use protocol::codec::{verify, TopicSettings};
use protocol::frame::Api;
use protocol::types::validate_topic_name;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Longest `mirror_source` a CreateTopic may name (the mirror's record of
/// its source: a name, a topic name of up to 249 bytes and two ids).
const MIRROR_SOURCE_BYTES_MAX: usize = 1024;

/// A `mirror_source` as a copy records it: printable text of at most
/// [`MIRROR_SOURCE_BYTES_MAX`] bytes, else INVALID_CONFIG.
pub(super) fn mirror_source(source: &str) -> Result<String, Failure> {
    if source.is_empty()
        || source.len() > MIRROR_SOURCE_BYTES_MAX
        || source.chars().any(char::is_control)
    {
        return Err(Failure::new(
            ErrorCode::InvalidConfig,
            format!("mirror_source must be 1..={MIRROR_SOURCE_BYTES_MAX} bytes of printable text"),
        ));
    }
    Ok(source.to_string())
}

/// Handles a CreateTopic request.
pub fn handle_create(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let request = verify::<wire::CreateTopicRequest>(header)
        .map_err(|e| invalid_header(Api::CreateTopic, e))?;
    let name = request.name().unwrap_or_default().to_string();
    validate_topic_name(&name)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let partitions = request.partitions();
    if partitions == 0 || partitions > crate::limits::PARTITIONS_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidConfig,
            format!(
                "partitions must be 1..={}, got {partitions}",
                crate::limits::PARTITIONS_MAX
            ),
        ));
    }
    let overrides = TopicSettings::decode(request.config());
    let mirror_source = match request.mirror_source().unwrap_or_default() {
        "" => None,
        source => Some(mirror_source(source)?),
    };
    shard
        .config
        .topic_settings(&overrides)
        .map_err(|e| Failure::new(ErrorCode::InvalidConfig, e.to_string()))?;
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::CreateTopic {
        name: name.clone(),
        partitions,
        overrides,
        mirror_source,
        reply,
    };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let api = Api::CreateTopic as u16;
        if let Err(error) = ask_control(&shard, msg, answer).await {
            return Some(Failure::new(error.code, error.message).response(api));
        }
        // The control thread answers after every shard, this one included,
        // has opened the topic.
        let Some(topic) = shard.topic(&name) else {
            return Some(
                Failure::new(ErrorCode::Internal, "topic vanished while being created")
                    .response(api),
            );
        };
        let metadata = shard.topic_metadata(&topic.borrow());
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::create_topic_response(fbb, &metadata).to_vec()
        });
        Some(Response {
            api,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}

/// Handles a DeleteTopic request.
pub fn handle_delete(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let request = verify::<wire::DeleteTopicRequest>(header)
        .map_err(|e| invalid_header(Api::DeleteTopic, e))?;
    let name = request.name().unwrap_or_default().to_string();
    validate_topic_name(&name)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::DeleteTopic {
        name: name.clone(),
        reply,
    };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let api = Api::DeleteTopic as u16;
        if let Err(error) = ask_control(&shard, msg, answer).await {
            return Some(Failure::new(error.code, error.message).response(api));
        }
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::delete_topic_response(fbb, &name).to_vec()
        });
        Some(Response {
            api,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}

/// Handles a CreatePartitions request: a topic's partition count raised.
pub fn handle_create_partitions(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let request = verify::<wire::CreatePartitionsRequest>(header)
        .map_err(|e| invalid_header(Api::CreatePartitions, e))?;
    let name = request.topic().unwrap_or_default().to_string();
    validate_topic_name(&name)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let partitions = request.partitions();
    if partitions == 0 || partitions > crate::limits::PARTITIONS_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidConfig,
            format!(
                "partitions must be 1..={}, got {partitions}",
                crate::limits::PARTITIONS_MAX
            ),
        ));
    }
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::CreatePartitions {
        name,
        partitions,
        reply,
    };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let api = Api::CreatePartitions as u16;
        let created = match ask_control(&shard, msg, answer).await {
            Ok(created) => created,
            Err(error) => return Some(Failure::new(error.code, error.message).response(api)),
        };
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::operations::create_partitions_response(fbb, &created).to_vec()
        });
        Some(Response {
            api,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}

/// Sends `msg` to the control thread and awaits its answer. A control
/// thread that has stopped (the broker is stopping) is SHUTTING_DOWN.
pub(crate) async fn ask_control<T>(
    shard: &Shard,
    msg: ControlMsg,
    answer: flume::Receiver<Result<T, ControlError>>,
) -> Result<T, ControlError> {
    let stopping = || ControlError {
        code: ErrorCode::ShuttingDown,
        message: "the broker is stopping".into(),
    };
    shard
        .control
        .send_async(msg)
        .await
        .map_err(|_| stopping())?;
    answer.recv_async().await.map_err(|_| stopping())?
}
