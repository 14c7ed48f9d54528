//! Metadata (v1–8): every shard of every broker with a Kafka listener is a
//! node; each partition's leader is the node of the shard that owns it on
//! its leader broker, so a client's produce and fetch land on that core.
//! A topic is not created by asking for it (ringlog creates topics on
//! purpose): an unknown one is UNKNOWN_TOPIC_OR_PARTITION.

use super::errors::code;
use super::node_id;
use super::versions::key;
use super::wire::{Malformed, Reader, Writer};
use crate::auth::authorize::may;
use crate::reply::Dispatched;
use crate::shard::Shard;
use protocol::acl::{Operation, ResourceType};
use protocol::codec::TopicMetadata;
use protocol::types::BrokerId;

/// The topics a request names (`None`: all).
fn read_request<'a>(version: i16, r: &mut Reader<'a>) -> Result<Option<Vec<&'a str>>, Malformed> {
    // Null (v1+): every topic.
    let wanted: Option<Vec<&'a str>> = match r.array(2, "topics")? {
        None => None,
        Some(count) => Some(
            (0..count)
                .map(|_| r.string("topic name"))
                .collect::<Result<_, _>>()?,
        ),
    };
    if version >= 4 {
        r.bool("allow_auto_topic_creation")?;
    }
    if version >= 8 {
        r.bool("include_cluster_authorized_operations")?;
        r.bool("include_topic_authorized_operations")?;
    }
    Ok(wanted)
}

/// Handles a Metadata request.
pub fn handle(
    shard: &Shard,
    version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let wanted = read_request(version, r)?;
    let brokers = shard.brokers.borrow();
    // The brokers' shards that speak Kafka, as nodes.
    let kafka_brokers: Vec<BrokerId> = brokers
        .iter()
        .filter(|b| b.shards.iter().any(|s| s.kafka_port.is_some()))
        .map(|b| b.broker_id)
        .collect();
    let mut w = Writer::default();
    if version >= 3 {
        w.i32(0); // throttle_time_ms
    }
    write_nodes(&mut w, &brokers);
    if version >= 2 {
        w.nullable_string(Some(&shard.config.cluster_id));
    }
    // Any node serves what a controller would (topics are created through
    // the registry from any broker): this one.
    w.i32(node_id(shard.config.broker_id, shard.id));
    let topics = shard.topics.borrow();
    let listed = listed(shard, principal, &topics, wanted.as_deref());
    w.array(listed.len());
    for (name, found) in &listed {
        match found {
            Err(error) => {
                w.i16(*error);
                w.string(name);
                w.bool(false); // is_internal
                w.array(0);
            }
            Ok(topic) => write_topic(&mut w, version, topic, &kafka_brokers),
        }
        if version >= 8 {
            w.i32(i32::MIN); // topic_authorized_operations: not asked for
        }
    }
    if version >= 8 {
        w.i32(i32::MIN); // cluster_authorized_operations
    }
    Ok(super::wire::ready(key::METADATA, w.out))
}

/// The topics to describe: every one `principal` may describe, or those
/// named, each found or why not.
fn listed<'a>(
    shard: &Shard,
    principal: &str,
    topics: &'a std::collections::BTreeMap<
        String,
        std::rc::Rc<std::cell::RefCell<crate::shard::Topic>>,
    >,
    wanted: Option<&[&'a str]>,
) -> Vec<(&'a str, Result<TopicMetadata, i16>)> {
    let describe = |name: &str| {
        may(
            shard,
            principal,
            ResourceType::Topic,
            name,
            Operation::Describe,
        )
    };
    match wanted {
        None => topics
            .iter()
            .filter(|(name, _)| describe(name))
            .map(|(name, topic)| (name.as_str(), Ok(shard.topic_metadata(&topic.borrow()))))
            .collect(),
        Some(names) => names
            .iter()
            .map(|&name| {
                let found = if describe(name) {
                    topics
                        .get(name)
                        .map(|t| shard.topic_metadata(&t.borrow()))
                        .ok_or(code::UNKNOWN_TOPIC_OR_PARTITION)
                } else {
                    Err(code::TOPIC_AUTHORIZATION_FAILED)
                };
                (name, found)
            })
            .collect(),
    }
}

/// Every shard with a Kafka listener, as a node.
fn write_nodes(w: &mut Writer, brokers: &[coordinator::registry::BrokerRecord]) {
    let nodes: usize = brokers
        .iter()
        .map(|b| b.shards.iter().filter(|s| s.kafka_port.is_some()).count())
        .sum();
    w.array(nodes);
    for broker in brokers.iter() {
        for endpoint in &broker.shards {
            let Some(port) = endpoint.kafka_port else {
                continue;
            };
            w.i32(node_id(broker.broker_id, endpoint.shard_id));
            w.string(&endpoint.host);
            w.i32(i32::from(port));
            w.nullable_string(broker.rack.as_deref());
        }
    }
}

/// One topic's entry: each partition's leader node, epoch, replicas, ISR.
fn write_topic(w: &mut Writer, version: i16, topic: &TopicMetadata, kafka_brokers: &[BrokerId]) {
    w.i16(code::NONE);
    w.string(&topic.name);
    w.bool(false); // is_internal
    w.array(topic.partitions.len());
    for p in &topic.partitions {
        // A copy's shard is the same on every broker of equal shard count
        // (`shard::placement`): the replicas are named by it too.
        let node = |broker: BrokerId| node_id(broker, p.shard_id);
        let leader_here = kafka_brokers.contains(&p.broker_id);
        w.i16(if leader_here {
            code::NONE
        } else {
            code::LEADER_NOT_AVAILABLE
        });
        w.i32(p.partition as i32);
        w.i32(if leader_here { node(p.broker_id) } else { -1 });
        if version >= 7 {
            w.i32(p.leader_epoch);
        }
        let replicas: Vec<i32> = if p.replicas.is_empty() {
            vec![node(p.broker_id)]
        } else {
            p.replicas.iter().map(|&b| node(b)).collect()
        };
        let isr: Vec<i32> = if p.replicas.is_empty() {
            vec![node(p.broker_id)]
        } else {
            p.isr.iter().map(|&b| node(b)).collect()
        };
        w.array(replicas.len());
        replicas.iter().for_each(|&n| w.i32(n));
        w.array(isr.len());
        isr.iter().for_each(|&n| w.i32(n));
        if version >= 5 {
            w.array(0); // offline_replicas
        }
    }
}
