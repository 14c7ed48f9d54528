//! Metadata: the live brokers with their shard ports, and where every
//! partition lives (broker and shard), so shard-aware clients send each
//! request straight to the owning core of the owning broker.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::shard::Shard;
use protocol::acl::ResourceType;
use protocol::codec::{verify, BrokerMetadata, Metadata, ShardAddress};
use protocol::frame::Api;
use protocol::{wire, ErrorCode};

/// Handles a Metadata request of `principal`: with authorization on, only
/// the topics it may describe are listed, and a topic it names that it may
/// not describe is refused (whether or not it exists: the answer does not
/// tell).
#[expect(
    clippy::too_many_lines,
    reason = "the Metadata answer built in one pass over brokers, topics and partitions"
)]
pub fn handle(shard: &Shard, header: &[u8], principal: &str) -> Result<Dispatched, Failure> {
    let request =
        verify::<wire::MetadataRequest>(header).map_err(|e| invalid_header(Api::Metadata, e))?;
    let wanted: Vec<&str> = request
        .topics()
        .map(|t| t.iter().collect())
        .unwrap_or_default();
    let filtered =
        shard.config.authorization && !shard.security.with(|s| s.acls.is_super_user(principal));
    let may_describe = |name: &str| {
        !filtered
            || crate::auth::authorize::may_describe(shard, principal, ResourceType::Topic, name)
    };
    for &name in &wanted {
        if !may_describe(name) {
            crate::metrics::bump(&shard.metrics.counters.authorization_denied_total, 1);
            return Err(Failure::new(
                ErrorCode::AuthorizationFailed,
                format!("{principal} may not describe topic {name:?}: Metadata of a topic needs describe (or read, write, delete, alter) on it"),
            ));
        }
    }
    // Metadata of every topic is built once per change of the topics or
    // brokers, not once per request (issue 8, item 7); a listing filtered
    // for one principal is built each time.
    let version = shard.metadata_version.get();
    if wanted.is_empty() && !filtered {
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
        for (name, topic) in topics.iter() {
            if may_describe(name) {
                listed.push(shard.topic_metadata(&topic.borrow()));
            }
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
        cluster_id: shard.config.cluster_id.clone(),
    };
    let header = super::with_builder(shard, |fbb| {
        protocol::codec::metadata_response(fbb, &metadata).to_vec()
    });
    if wanted.is_empty() && !filtered {
        *shard.metadata_all.borrow_mut() = Some((version, header.clone()));
    }
    Ok(Dispatched::Ready(Response {
        api: Api::Metadata as u16,
        error: 0,
        header,
        payload: Payload::None,
    }))
}
