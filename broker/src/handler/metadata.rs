//! Metadata: the live brokers with their shard ports, and where every
//! partition lives (broker and shard), so shard-aware clients send each
//! request straight to the owning core of the owning broker.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::shard::Shard;
use protocol::codec::{verify, BrokerMetadata, Metadata, ShardAddress};
use protocol::frame::Api;
use protocol::{wire, ErrorCode};

/// Handles a Metadata request.
pub fn handle(shard: &Shard, header: &[u8]) -> Result<Dispatched, Failure> {
    let request =
        verify::<wire::MetadataRequest>(header).map_err(|e| invalid_header(Api::Metadata, e))?;
    let wanted: Vec<&str> = request
        .topics()
        .map(|t| t.iter().collect())
        .unwrap_or_default();
    // Metadata of every topic is built once per change of the topics or
    // brokers, not once per request (issue 8, item 7).
    let version = shard.metadata_version.get();
    if wanted.is_empty() {
        if let Some((cached, header)) = &*shard.metadata_all.borrow() {
            if *cached == version {
                return Ok(Dispatched::Ready(Response {
                    api: Api::Metadata as u16,
                    error: 0,
                    header: header.clone(),
                    payload: Payload::None,
                }));
            }
        }
    }
    let topics = shard.topics.borrow();
    let mut listed = Vec::new();
    if wanted.is_empty() {
        for topic in topics.values() {
            listed.push(shard.topic_metadata(&topic.borrow()));
        }
    } else {
        for &name in &wanted {
            let Some(topic) = topics.get(name) else {
                return Err(Failure::new(
                    ErrorCode::UnknownTopic,
                    format!("unknown topic {name:?}"),
                ));
            };
            listed.push(shard.topic_metadata(&topic.borrow()));
        }
    }
    let metadata = Metadata {
        brokers: shard
            .brokers
            .borrow()
            .iter()
            .map(|b| BrokerMetadata {
                broker_id: b.broker_id,
                shards: b
                    .shards
                    .iter()
                    .map(|s| ShardAddress {
                        shard_id: s.shard_id,
                        host: s.host.clone(),
                        port: s.port,
                    })
                    .collect(),
                rack: b.rack.clone(),
            })
            .collect(),
        topics: listed,
    };
    let header = super::with_builder(shard, |fbb| {
        protocol::codec::metadata_response(fbb, &metadata).to_vec()
    });
    if wanted.is_empty() {
        *shard.metadata_all.borrow_mut() = Some((version, header.clone()));
    }
    Ok(Dispatched::Ready(Response {
        api: Api::Metadata as u16,
        error: 0,
        header,
        payload: Payload::None,
    }))
}
