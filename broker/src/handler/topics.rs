//! CreateTopic and DeleteTopic.
//!
//! Shard 0 is the admin shard: it serialises topic changes, rewrites the
//! standalone registry (`topics.toml`), then tells every shard to open or
//! drop its partitions and waits for all of them before answering. Other
//! shards forward these requests to shard 0.

use super::{forward, invalid_header, Dispatched, Failure, Payload, Response};
use crate::shard::forward::ShardMsg;
use crate::shard::Shard;
use crate::storage::meta::{store_topics, StoredTopic};
use protocol::codec::{verify, TopicSettings};
use protocol::frame::Api;
use protocol::types::validate_topic_name;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

const ADMIN_SHARD: u16 = 0;

/// Handles a CreateTopic request.
pub fn handle_create(
    shard: &Rc<Shard>,
    request_id: u32,
    header: &[u8],
) -> Result<Dispatched, Failure> {
    let request = verify::<wire::CreateTopicRequest>(header)
        .map_err(|e| invalid_header(Api::CreateTopic, e))?;
    if shard.id != ADMIN_SHARD {
        return forward(
            shard,
            ADMIN_SHARD,
            Api::CreateTopic as u16,
            request_id,
            header,
            &[],
        );
    }
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
    shard
        .config
        .topic_settings(&overrides)
        .map_err(|e| Failure::new(ErrorCode::InvalidConfig, e))?;
    if shard.topic(&name).is_some() || shard.admin_busy.borrow().contains(&name) {
        return Err(Failure::new(
            ErrorCode::TopicAlreadyExists,
            format!("topic {name:?} already exists"),
        ));
    }
    let stored = StoredTopic {
        name: name.clone(),
        partitions,
        retention_ms: overrides.retention_ms,
        retention_bytes: overrides.retention_bytes,
        segment_bytes: overrides.segment_bytes,
        flush_messages: overrides.flush_messages,
        flush_interval_ms: overrides.flush_interval_ms,
    };
    let mut registry = shard.registry.borrow().clone();
    registry.push(stored.clone());
    store_topics(&shard.config.data_dir, &registry)
        .map_err(|e| Failure::new(ErrorCode::StorageFailed, e.to_string()))?;
    *shard.registry.borrow_mut() = registry;
    shard.admin_busy.borrow_mut().push(name.clone());
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut failures = Vec::new();
        for peer in &shard.peers {
            let (done, result) = flume::bounded(1);
            let msg = ShardMsg::TopicCreated {
                topic: stored.clone(),
                done,
            };
            if peer.send_async(msg).await.is_err() {
                failures.push("a shard has stopped".to_string());
                continue;
            }
            match result.recv_async().await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(e),
                Err(_) => failures.push("a shard has stopped".to_string()),
            }
        }
        shard.admin_busy.borrow_mut().retain(|n| n != &name);
        if !failures.is_empty() {
            return Some(
                Failure::new(ErrorCode::StorageFailed, failures.join("; "))
                    .response(Api::CreateTopic as u16),
            );
        }
        tracing::info!(topic = %name, partitions, "created topic");
        let Some(topic) = shard.topic(&name) else {
            return Some(
                Failure::new(ErrorCode::Internal, "topic vanished while being created")
                    .response(Api::CreateTopic as u16),
            );
        };
        let metadata = shard.topic_metadata(&topic.borrow());
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::create_topic_response(fbb, &metadata).to_vec()
        });
        Some(Response {
            api: Api::CreateTopic as u16,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}

/// Handles a DeleteTopic request.
pub fn handle_delete(
    shard: &Rc<Shard>,
    request_id: u32,
    header: &[u8],
) -> Result<Dispatched, Failure> {
    let request = verify::<wire::DeleteTopicRequest>(header)
        .map_err(|e| invalid_header(Api::DeleteTopic, e))?;
    if shard.id != ADMIN_SHARD {
        return forward(
            shard,
            ADMIN_SHARD,
            Api::DeleteTopic as u16,
            request_id,
            header,
            &[],
        );
    }
    let name = request.name().unwrap_or_default().to_string();
    validate_topic_name(&name)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    if shard.topic(&name).is_none() || shard.admin_busy.borrow().contains(&name) {
        return Err(Failure::new(
            ErrorCode::UnknownTopic,
            format!("unknown topic {name:?}"),
        ));
    }
    let registry: Vec<StoredTopic> = shard
        .registry
        .borrow()
        .iter()
        .filter(|t| t.name != name)
        .cloned()
        .collect();
    store_topics(&shard.config.data_dir, &registry)
        .map_err(|e| Failure::new(ErrorCode::StorageFailed, e.to_string()))?;
    *shard.registry.borrow_mut() = registry;
    shard.admin_busy.borrow_mut().push(name.clone());
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        for peer in &shard.peers {
            let (done, finished) = flume::bounded(1);
            let msg = ShardMsg::TopicDeleted {
                name: name.clone(),
                done,
            };
            if peer.send_async(msg).await.is_ok() {
                let _ = finished.recv_async().await;
            }
        }
        shard.admin_busy.borrow_mut().retain(|n| n != &name);
        tracing::info!(topic = %name, "deleted topic");
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::delete_topic_response(fbb, &name).to_vec()
        });
        Some(Response {
            api: Api::DeleteTopic as u16,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}
