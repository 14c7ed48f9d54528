//! AlterTopicConfig: a topic's settings changed while it runs.
//!
//! The handler checks every name and value before anything is stored —
//! the names and number formats (`protocol::codec::topic_config`), then
//! the resulting settings against this broker's ranges, as a CreateTopic's
//! — and hands the change to the control thread, which rewrites the
//! topic's record and answers once every live broker applies it.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::mailbox::ControlMsg;
use crate::shard::Shard;
use protocol::codec::topic_config::{parse_changes, request_entries};
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::types::validate_topic_name;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// Handles an AlterTopicConfig request.
pub fn handle(shard: &Rc<Shard>, header: &[u8]) -> Result<Dispatched, Failure> {
    let request = verify::<wire::AlterTopicConfigRequest>(header)
        .map_err(|e| invalid_header(Api::AlterTopicConfig, e))?;
    let name = request.topic().unwrap_or_default().to_string();
    validate_topic_name(&name)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let (set, delete) = request_entries(&request);
    if set.is_empty() && delete.is_empty() {
        return Err(Failure::new(
            ErrorCode::InvalidConfig,
            "no setting to change: name one to set or to delete",
        ));
    }
    let changes = parse_changes(&set, &delete)
        .map_err(|e| Failure::new(ErrorCode::InvalidConfig, e.to_string()))?;
    let Some(topic) = shard.topic(&name) else {
        return Err(Failure::new(
            ErrorCode::UnknownTopic,
            format!("no topic {name:?}"),
        ));
    };
    // The settings as they would be, against this broker's ranges (the
    // record's own checks, min.insync.replicas against the replication
    // factor, are the control thread's).
    let mut overrides = topic.borrow().overrides;
    for (setting, value) in &changes {
        setting.set(&mut overrides, *value);
    }
    shard
        .config
        .topic_settings(&overrides)
        .map_err(|e| Failure::new(ErrorCode::InvalidConfig, kafka_names(&e.to_string())))?;
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::AlterTopicConfig {
        name: name.clone(),
        changes,
        reply,
    };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let api = Api::AlterTopicConfig as u16;
        if let Err(error) = super::topics::ask_control(&shard, msg, answer).await {
            return Some(Failure::new(error.code, error.message).response(api));
        }
        // The control thread answers after this broker's shards applied it.
        let Some(topic) = shard.topic(&name) else {
            return Some(
                Failure::new(ErrorCode::UnknownTopic, "the topic was deleted meanwhile")
                    .response(api),
            );
        };
        let metadata = shard.topic_metadata(&topic.borrow());
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::topic_config::alter_topic_config_response(fbb, &metadata).to_vec()
        });
        Some(Response {
            api,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}

/// A settings error in the names this request used (`segment.bytes`, not
/// the configuration file's `segment_bytes`).
fn kafka_names(message: &str) -> String {
    [
        ("retention_ms", "retention.ms"),
        ("retention_bytes", "retention.bytes"),
        ("segment_bytes_min", "segment_bytes_min"),
        ("segment_bytes must", "segment.bytes must"),
        ("flush_messages", "flush.messages"),
        ("flush_interval_ms", "flush.ms"),
    ]
    .iter()
    .fold(message.to_string(), |m, (from, to)| m.replace(from, to))
}
