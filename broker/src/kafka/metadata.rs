//! Metadata (v1–12; v9+ flexible, v10+ with topic ids): every shard of every broker with a Kafka listener is a
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

/// A topic a request asks for: by name, or (v12+) by its id alone.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Asked<'a> {
    Name(&'a str),
    Id([u8; 16]),
}

/// The topics a request names (`None`: all).
fn read_request<'a>(version: i16, r: &mut Reader<'a>) -> Result<Option<Vec<Asked<'a>>>, Malformed> {
    // Null (v1+): every topic.
    let wanted = match r.array(2, "topics")? {
        None => None,
        Some(count) => Some(
            (0..count)
                .map(|_| read_topic(version, r))
                .collect::<Result<_, _>>()?,
        ),
    };
    if version >= 4 {
        r.bool("allow_auto_topic_creation")?;
    }
    if (8..=10).contains(&version) {
        r.bool("include_cluster_authorized_operations")?;
    }
    if version >= 8 {
        r.bool("include_topic_authorized_operations")?;
    }
    if version >= 9 {
        r.tagged_fields("tagged fields")?;
    }
    Ok(wanted)
}

fn read_topic<'a>(version: i16, r: &mut Reader<'a>) -> Result<Asked<'a>, Malformed> {
    let id = if version >= 10 {
        r.uuid("topic_id")?
    } else {
        [0; 16]
    };
    let name = r.nullable_string("topic name")?;
    if version >= 9 {
        r.tagged_fields("topic tagged fields")?;
    }
    // A topic with an id is asked for by it, whatever its name says (the
    // Java client sends an empty name beside the id, as Kafka reads it).
    Ok(match name {
        _ if id != [0; 16] => Asked::Id(id),
        Some(name) => Asked::Name(name),
        None => Asked::Id(id),
    })
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
    let mut w = if version >= 9 {
        Writer::flexible_answer()
    } else {
        Writer::default()
    };
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
    for topic in &listed {
        match &topic.found {
            Err(error) => {
                w.i16(*error);
                w.nullable_string(topic.name);
                if version >= 10 {
                    w.uuid(&topic.id);
                }
                w.bool(false); // is_internal
                w.array(0);
            }
            Ok(found) => write_topic(&mut w, version, found, &kafka_brokers),
        }
        if version >= 8 {
            w.i32(i32::MIN); // topic_authorized_operations: not asked for
        }
        w.end_struct();
    }
    if (8..=10).contains(&version) {
        w.i32(i32::MIN); // cluster_authorized_operations
    }
    w.end_struct();
    Ok(super::wire::ready(key::METADATA, w.out))
}

/// A topic's id as Kafka's UUID: ringlog's is 32 hex digits; an older
/// topic without one is the zero UUID (which clients take as "no id").
fn topic_uuid(id: &str) -> [u8; 16] {
    let mut uuid = [0u8; 16];
    if id.len() != 32 {
        return uuid;
    }
    for (i, byte) in uuid.iter_mut().enumerate() {
        match u8::from_str_radix(&id[2 * i..2 * i + 2], 16) {
            Ok(b) => *byte = b,
            Err(_) => return [0; 16],
        }
    }
    uuid
}

/// One topic of the answer: its name (`None`: asked for by an unknown id),
/// its id, and what was found.
struct Listed<'a> {
    name: Option<&'a str>,
    id: [u8; 16],
    found: Result<TopicMetadata, i16>,
}

type Topics =
    std::collections::BTreeMap<String, std::rc::Rc<std::cell::RefCell<crate::shard::Topic>>>;

/// The topics to describe: every one `principal` may describe, or those
/// asked for, each found or why not.
fn listed<'a>(
    shard: &Shard,
    principal: &str,
    topics: &'a Topics,
    wanted: Option<&[Asked<'a>]>,
) -> Vec<Listed<'a>> {
    let describe = |name: &str| {
        may(
            shard,
            principal,
            ResourceType::Topic,
            name,
            Operation::Describe,
        )
    };
    let found =
        |name: &'a str, topic: Option<&std::rc::Rc<std::cell::RefCell<crate::shard::Topic>>>| {
            let metadata = topic.map(|t| shard.topic_metadata(&t.borrow()));
            let id = metadata.as_ref().map_or([0; 16], |m| topic_uuid(&m.id));
            let found = if !describe(name) {
                Err(code::TOPIC_AUTHORIZATION_FAILED)
            } else {
                metadata.ok_or(code::UNKNOWN_TOPIC_OR_PARTITION)
            };
            Listed {
                name: Some(name),
                id,
                found,
            }
        };
    match wanted {
        None => topics
            .iter()
            .filter(|(name, _)| describe(name))
            .map(|(name, topic)| found(name, Some(topic)))
            .collect(),
        Some(asked) => asked
            .iter()
            .map(|asked| match *asked {
                Asked::Name(name) => found(name, topics.get(name)),
                Asked::Id(id) => {
                    let named = topics
                        .iter()
                        .find(|(_, t)| id != [0; 16] && topic_uuid(&t.borrow().id) == id);
                    match named {
                        Some((name, topic)) => found(name, Some(topic)),
                        None => Listed {
                            name: None,
                            id,
                            found: Err(code::UNKNOWN_TOPIC_ID),
                        },
                    }
                }
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
            w.end_struct();
        }
    }
}

/// One topic's entry: each partition's leader node, epoch, replicas, ISR.
fn write_topic(w: &mut Writer, version: i16, topic: &TopicMetadata, kafka_brokers: &[BrokerId]) {
    w.i16(code::NONE);
    w.string(&topic.name);
    if version >= 10 {
        w.uuid(&topic_uuid(&topic.id));
    }
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
        w.end_struct();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::wire::Writer;

    #[test]
    fn a_topic_id_is_its_32_hex_digits_and_anything_else_is_the_zero_uuid() {
        let id = "000102030405060708090a0b0c0d0eff";
        let mut want = [0u8; 16];
        (0..15).for_each(|i| want[i] = i as u8);
        want[15] = 0xff;
        assert_eq!(topic_uuid(id), want);
        assert_eq!(topic_uuid(""), [0; 16]);
        assert_eq!(topic_uuid("zz0102030405060708090a0b0c0d0eff"), [0; 16]);
    }

    #[test]
    fn a_flexible_request_names_topics_by_name_or_by_id_alone() {
        // v12: two topics, one by name, one by id; then the flags.
        let mut w = Writer::flexible_answer();
        w.out.clear();
        w.array(2);
        w.uuid(&[0; 16]);
        w.nullable_string(Some("named"));
        w.end_struct();
        w.uuid(&[9; 16]);
        w.nullable_string(None);
        w.end_struct();
        w.bool(true); // allow_auto_topic_creation
        w.bool(false); // include_topic_authorized_operations
        w.end_struct();
        let first = w.out;
        let mut r = Reader::flexible(&first);
        let asked = read_request(12, &mut r).unwrap().unwrap();
        assert_eq!(asked, [Asked::Name("named"), Asked::Id([9; 16])]);
        assert_eq!(r.remaining(), 0);
        // An id beside a name: the id rules (the Java client's by-id asks).
        let mut w = Writer::flexible_answer();
        w.out.clear();
        w.array(1);
        w.uuid(&[9; 16]);
        w.nullable_string(Some(""));
        w.end_struct();
        w.bool(false);
        w.bool(false);
        w.end_struct();
        let asked = read_request(12, &mut Reader::flexible(&w.out)).unwrap();
        assert_eq!(asked, Some(vec![Asked::Id([9; 16])]));
        // v10 has the cluster flag too; a request cut short is malformed.
        let mut r = Reader::flexible(&first);
        assert!(read_request(10, &mut r).is_err());
        // A null array (compact 0): every topic.
        let mut r = Reader::flexible(&[0, 1, 0, 0, 0]);
        assert_eq!(read_request(9, &mut r).unwrap(), None);
    }
}
