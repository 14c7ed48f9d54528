//! A Kafka group as `ringlog groups describe` shows it, beside ringlog's
//! own groups: the members and their topics from the stored group (the
//! last completed rebalance), each partition's owner from the leader's
//! assignment, and the committed offsets. The consumer protocol's
//! subscription and assignment are opaque to the coordinator; here they
//! are read (Kafka's `ConsumerProtocolSubscription` and
//! `ConsumerProtocolAssignment`, any version: the fields read are the
//! first ones of each) only to show them.

use super::super::wire::Reader;
use coordinator::kafka_groups::{KafkaOffset, SavedGroup};
use coordinator::registry::TopicRecord;
use protocol::codec::groups::{
    GroupDescription, GroupMemberInfo, GroupPartitionInfo, GroupTopicInfo, GroupView,
};
use std::collections::{BTreeMap, BTreeSet};

/// The topics of a consumer's subscription (empty if it is not one).
pub fn subscribed(metadata: &[u8]) -> Vec<String> {
    let mut r = Reader::new(metadata);
    let read = |r: &mut Reader<'_>| -> Result<Vec<String>, super::super::wire::Malformed> {
        r.i16("version")?;
        let count = r.array(2, "topics")?.unwrap_or(0);
        (0..count)
            .map(|_| r.string("topic").map(str::to_string))
            .collect()
    };
    read(&mut r).unwrap_or_default()
}

/// The partitions of a consumer's assignment (empty if it is not one).
pub fn assigned(assignment: &[u8]) -> Vec<(String, u32)> {
    let mut r = Reader::new(assignment);
    let read = |r: &mut Reader<'_>| -> Result<Vec<(String, u32)>, super::super::wire::Malformed> {
        r.i16("version")?;
        let mut out = Vec::new();
        for _ in 0..r.array(6, "topics")?.unwrap_or(0) {
            let topic = r.string("topic")?.to_string();
            for _ in 0..r.array(4, "partitions")?.unwrap_or(0) {
                out.push((topic.clone(), r.i32("partition")?.max(0) as u32));
            }
        }
        Ok(out)
    };
    read(&mut r).unwrap_or_default()
}

/// The description of a Kafka group, or `None` when it has neither a
/// stored state with members nor committed offsets.
pub fn describe(
    saved: Option<SavedGroup>,
    offsets: Vec<KafkaOffset>,
    topics: &BTreeMap<String, TopicRecord>,
) -> Option<GroupDescription> {
    let members = saved.map(|s| s.members).unwrap_or_default();
    if members.is_empty() && offsets.is_empty() {
        return None;
    }
    let mut owners: BTreeMap<(String, u32), String> = BTreeMap::new();
    let mut subscribed_topics = BTreeSet::new();
    let mut infos = Vec::new();
    for m in &members {
        let topics = subscribed(&m.metadata);
        subscribed_topics.extend(topics.iter().cloned());
        for p in assigned(&m.assignment) {
            owners.insert(p, m.member_id.clone());
        }
        infos.push(GroupMemberInfo {
            member_id: m.member_id.clone(),
            topics,
        });
    }
    let mut partitions: BTreeMap<(String, u32), GroupPartitionInfo> = BTreeMap::new();
    for ((topic, partition), owner) in &owners {
        partitions.insert(
            (topic.clone(), *partition),
            GroupPartitionInfo {
                topic: topic.clone(),
                partition: *partition,
                owner: owner.clone(),
                offset: None,
                leader_epoch: -1,
            },
        );
    }
    for o in offsets {
        let entry = partitions
            .entry((o.topic.clone(), o.partition))
            .or_insert_with(|| GroupPartitionInfo {
                topic: o.topic.clone(),
                partition: o.partition,
                owner: String::new(),
                offset: None,
                leader_epoch: -1,
            });
        entry.offset = u64::try_from(o.offset).ok();
        entry.leader_epoch = o.leader_epoch;
    }
    let view = GroupView {
        members: infos,
        topics: subscribed_topics
            .into_iter()
            .map(|name| GroupTopicInfo {
                partitions: topics.get(&name).map_or(0, |t| t.partitions),
                name,
            })
            .collect(),
        ..GroupView::default()
    };
    Some(GroupDescription {
        view,
        partitions: partitions.into_values().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::wire::Writer;

    #[test]
    fn a_consumers_subscription_and_assignment_are_read_and_garbage_is_nothing() {
        let mut w = Writer::default();
        w.i16(3);
        w.array(2);
        w.string("a");
        w.string("b");
        w.bytes(b"user data");
        assert_eq!(subscribed(&w.out), vec!["a".to_string(), "b".to_string()]);
        let mut w = Writer::default();
        w.i16(0);
        w.array(1);
        w.string("a");
        w.array(2);
        w.i32(0);
        w.i32(3);
        assert_eq!(
            assigned(&w.out),
            vec![("a".to_string(), 0), ("a".to_string(), 3)]
        );
        assert!(subscribed(&[0, 1, 0, 0, 0, 9]).is_empty());
        assert!(assigned(&[0xff]).is_empty());
    }
}
