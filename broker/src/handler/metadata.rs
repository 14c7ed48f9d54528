//! Metadata: this broker, its shard ports, and where every partition lives,
//! so shard-aware clients send each request straight to the owning core.

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
    let topics = shard.topics.borrow();
    let mut listed = Vec::new();
    if wanted.is_empty() {
        for topic in topics.values() {
            listed.push(shard.topic_metadata(&topic.borrow()));
        }
    } else {
        for name in wanted {
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
        brokers: vec![BrokerMetadata {
            broker_id: shard.config.broker_id,
            shards: shard
                .addresses
                .iter()
                .enumerate()
                .map(|(i, addr)| ShardAddress {
                    shard_id: i as u16,
                    host: shard
                        .config
                        .advertise_host
                        .clone()
                        .unwrap_or_else(|| addr.ip().to_string()),
                    port: addr.port(),
                })
                .collect(),
        }],
        topics: listed,
    };
    let header = super::with_builder(shard, |fbb| {
        protocol::codec::metadata_response(fbb, &metadata).to_vec()
    });
    Ok(Dispatched::Ready(Response {
        api: Api::Metadata as u16,
        error: 0,
        header,
        payload: Payload::None,
    }))
}
