//! OffsetCommit (v2–7) and OffsetFetch (v1–5) at the group's coordinator.
//! A committed offset is a byte position — a record's offset + 1 — stored
//! with its leader epoch and the client's metadata string in the registry
//! ([`coordinator::kafka_groups`]), fenced by the coordinator key. A
//! commit needs Read on the group and on each topic; a commit with
//! generation −1 and no member (a consumer that `assign()`s partitions)
//! is taken while the group has no members.

use super::super::errors::code;
use super::super::versions::key;
use super::super::wire::{ready, Malformed, Reader, Writer};
use super::state::Phase;
use super::{ask, me, registry_code, with_group, Caller};
use crate::auth::authorize::{may, may_describe};
use crate::limits::{KAFKA_OFFSETS_PER_REQUEST_MAX, KAFKA_OFFSET_METADATA_BYTES_MAX};
use crate::reply::Dispatched;
use crate::shard::Shard;
use coordinator::kafka_groups::{KafkaGroupAnswer, KafkaGroupOp, KafkaOffset};
use protocol::acl::{Operation, ResourceType};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

/// A topic's partitions and a value for each, in request order.
type PerTopic<T> = Vec<(String, Vec<(i32, T)>)>;

fn commit_body(version: i16, topics: &PerTopic<i16>) -> Vec<u8> {
    let mut w = Writer::default();
    if version >= 3 {
        w.i32(0); // throttle_time_ms
    }
    w.array(topics.len());
    for (name, partitions) in topics {
        w.string(name);
        w.array(partitions.len());
        for (p, error) in partitions {
            w.i32(*p);
            w.i16(*error);
        }
    }
    w.out
}

/// Every partition of `topics` answered with one error.
fn all(topics: &PerTopic<KafkaOffset>, error: i16) -> PerTopic<i16> {
    topics
        .iter()
        .map(|(t, ps)| (t.clone(), ps.iter().map(|(p, _)| (*p, error)).collect()))
        .collect()
}

fn read_commit(
    version: i16,
    r: &mut Reader<'_>,
) -> Result<(String, i32, String, PerTopic<KafkaOffset>), Malformed> {
    let group = r.string("group_id")?.to_string();
    let generation = r.i32("generation_id")?;
    let member_id = r.string("member_id")?.to_string();
    if version >= 7 {
        r.nullable_string("group_instance_id")?;
    }
    if version <= 4 {
        r.i64("retention_time_ms")?;
    }
    let mut topics = Vec::new();
    for _ in 0..r.array(6, "topics")?.unwrap_or(0) {
        let topic = r.string("topic name")?.to_string();
        let mut partitions = Vec::new();
        for _ in 0..r.array(16, "partitions")?.unwrap_or(0) {
            let partition = r.i32("partition_index")?;
            let offset = r.i64("committed_offset")?;
            let leader_epoch = if version >= 6 {
                r.i32("committed_leader_epoch")?
            } else {
                -1
            };
            let metadata = r.nullable_string("committed_metadata")?.unwrap_or_default();
            partitions.push((
                partition,
                KafkaOffset {
                    topic: topic.clone(),
                    partition: partition.max(0) as u32,
                    offset,
                    leader_epoch,
                    metadata: metadata.to_string(),
                },
            ));
        }
        topics.push((topic, partitions));
    }
    Ok((group, generation, member_id, topics))
}

/// Each partition's own error (rights, existence, sizes), or NONE.
fn check_partitions(
    shard: &Shard,
    principal: &str,
    topics: &PerTopic<KafkaOffset>,
) -> PerTopic<i16> {
    let known = shard.topics.borrow();
    topics
        .iter()
        .map(|(name, partitions)| {
            let readable = may(shard, principal, ResourceType::Topic, name, Operation::Read);
            let count = known.get(name).map(|t| t.borrow().partitions);
            let errors = partitions
                .iter()
                .map(|(p, o)| {
                    let error = if !readable {
                        code::TOPIC_AUTHORIZATION_FAILED
                    } else if count.is_none_or(|c| *p < 0 || *p as u32 >= c) {
                        code::UNKNOWN_TOPIC_OR_PARTITION
                    } else if o.metadata.len() > KAFKA_OFFSET_METADATA_BYTES_MAX {
                        code::OFFSET_METADATA_TOO_LARGE
                    } else {
                        code::NONE
                    };
                    (*p, error)
                })
                .collect();
            (name.clone(), errors)
        })
        .collect()
}

/// An OffsetCommit past its checks of rights and names.
struct Commit {
    name: String,
    generation: i32,
    member_id: String,
    topics: PerTopic<KafkaOffset>,
}

impl Commit {
    /// The member's and generation's check, then the offsets stored; each
    /// partition's error (`answers` holds those found before).
    async fn run(
        self,
        shard: &Rc<Shard>,
        group: &Rc<std::cell::RefCell<super::state::Group>>,
        mut answers: PerTopic<i16>,
    ) -> PerTopic<i16> {
        let group_error = {
            let mut g = group.borrow_mut();
            if self.generation < 0 && self.member_id.is_empty() && g.members.is_empty() {
                code::NONE
            } else {
                match g.check(&self.member_id, self.generation) {
                    code::NONE if g.phase == Phase::CompletingRebalance => {
                        code::REBALANCE_IN_PROGRESS
                    }
                    code::NONE => {
                        g.touch(&self.member_id, Instant::now());
                        code::NONE
                    }
                    error => error,
                }
            }
        };
        let mut offsets = Vec::new();
        for ((_, ps), (_, errors)) in self.topics.into_iter().zip(answers.iter_mut()) {
            for ((_, offset), (_, error)) in ps.into_iter().zip(errors.iter_mut()) {
                if *error == code::NONE {
                    if group_error == code::NONE {
                        offsets.push(offset);
                    } else {
                        *error = group_error;
                    }
                }
            }
        }
        if offsets.is_empty() {
            return answers;
        }
        let op = KafkaGroupOp::Commit {
            group: self.name.clone(),
            me: me(shard),
            offsets,
        };
        if let Err(error) = ask(shard, op).await {
            let error_code = registry_code(&error);
            if error_code == code::NOT_COORDINATOR {
                shard.kafka_groups.drop_group(&self.name);
            }
            for (_, errors) in &mut answers {
                for (_, e) in errors {
                    if *e == code::NONE {
                        *e = error_code;
                    }
                }
            }
        }
        answers
    }
}

/// Handles an OffsetCommit request.
pub fn handle_commit(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<Dispatched, Malformed> {
    let (name, generation, member_id, topics) = read_commit(version, r)?;
    let count: usize = topics.iter().map(|(_, p)| p.len()).sum();
    if !may(
        shard,
        &caller.principal,
        ResourceType::Group,
        &name,
        Operation::Read,
    ) {
        let body = commit_body(version, &all(&topics, code::GROUP_AUTHORIZATION_FAILED));
        return Ok(ready(key::OFFSET_COMMIT, body));
    }
    if count > KAFKA_OFFSETS_PER_REQUEST_MAX {
        let body = commit_body(version, &all(&topics, code::INVALID_REQUEST));
        return Ok(ready(key::OFFSET_COMMIT, body));
    }
    let answers = check_partitions(shard, &caller.principal, &topics);
    let failed = all(&topics, 0);
    Ok(with_group(
        shard,
        key::OFFSET_COMMIT,
        name.clone(),
        move |error| {
            let mut failed = failed;
            for (_, ps) in &mut failed {
                for (_, e) in ps {
                    *e = error;
                }
            }
            commit_body(version, &failed)
        },
        move |shard, group| async move {
            let commit = Commit {
                name,
                generation,
                member_id,
                topics,
            };
            commit_body(version, &commit.run(&shard, &group, answers).await)
        },
    ))
}

fn fetch_body(version: i16, error: i16, topics: &PerTopic<Fetched>) -> Vec<u8> {
    let mut w = Writer::default();
    if version >= 3 {
        w.i32(0); // throttle_time_ms
    }
    w.array(topics.len());
    for (name, partitions) in topics {
        w.string(name);
        w.array(partitions.len());
        for (p, (offset, epoch, metadata, error)) in partitions {
            w.i32(*p);
            w.i64(*offset);
            if version >= 5 {
                w.i32(*epoch);
            }
            w.nullable_string(Some(metadata));
            w.i16(*error);
        }
    }
    if version >= 2 {
        w.i16(error);
    }
    w.out
}

/// An OffsetFetch's group and the partitions it asks for (`None`: all).
type Wanted = Option<Vec<(String, Vec<i32>)>>;

fn read_fetch(r: &mut Reader<'_>) -> Result<(String, Wanted), Malformed> {
    let name = r.string("group_id")?.to_string();
    // Null (v2+): every partition the group has committed.
    let wanted = match r.array(6, "topics")? {
        None => None,
        Some(count) => {
            let mut topics = Vec::with_capacity(count);
            for _ in 0..count {
                let topic = r.string("topic name")?.to_string();
                let n = r.array(4, "partition_indexes")?.unwrap_or(0);
                let partitions = (0..n)
                    .map(|_| r.i32("partition index"))
                    .collect::<Result<Vec<_>, _>>()?;
                topics.push((topic, partitions));
            }
            Some(topics)
        }
    };
    Ok((name, wanted))
}

/// What OffsetFetch answers per partition: offset, leader epoch,
/// metadata, error.
type Fetched = (i64, i32, String, i16);

/// The answer's partitions from the stored offsets.
fn fetched(
    shard: &Shard,
    principal: &str,
    stored: Vec<KafkaOffset>,
    wanted: Wanted,
) -> PerTopic<Fetched> {
    let mut by_topic: BTreeMap<String, BTreeMap<i32, KafkaOffset>> = BTreeMap::new();
    for o in stored {
        by_topic
            .entry(o.topic.clone())
            .or_default()
            .insert(o.partition as i32, o);
    }
    let readable = |t: &str| may_describe(shard, principal, ResourceType::Topic, t);
    let answer = |o: Option<&KafkaOffset>| match o {
        Some(o) => (o.offset, o.leader_epoch, o.metadata.clone(), code::NONE),
        None => (-1, -1, String::new(), code::NONE),
    };
    let Some(wanted) = wanted else {
        return by_topic
            .iter()
            .filter(|(topic, _)| readable(topic))
            .map(|(topic, ps)| {
                let ps = ps.iter().map(|(p, o)| (*p, answer(Some(o)))).collect();
                (topic.clone(), ps)
            })
            .collect();
    };
    wanted
        .into_iter()
        .map(|(topic, partitions)| {
            let known = by_topic.get(&topic);
            let ok = readable(&topic);
            let ps = partitions
                .into_iter()
                .map(|p| {
                    if ok {
                        (p, answer(known.and_then(|k| k.get(&p))))
                    } else {
                        (p, (-1, -1, String::new(), code::TOPIC_AUTHORIZATION_FAILED))
                    }
                })
                .collect();
            (topic, ps)
        })
        .collect()
}

/// Handles an OffsetFetch request.
pub fn handle_fetch(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<Dispatched, Malformed> {
    let (name, wanted) = read_fetch(r)?;
    let error_only = move |error: i16| {
        let topics: PerTopic<Fetched> = Vec::new();
        fetch_body(version, error, &topics)
    };
    if !may_describe(shard, &caller.principal, ResourceType::Group, &name) {
        return Ok(ready(
            key::OFFSET_FETCH,
            error_only(code::GROUP_AUTHORIZATION_FAILED),
        ));
    }
    let asked: usize = wanted
        .as_ref()
        .map_or(0, |w| w.iter().map(|(_, p)| p.len()).sum());
    if asked > KAFKA_OFFSETS_PER_REQUEST_MAX {
        return Ok(ready(key::OFFSET_FETCH, error_only(code::INVALID_REQUEST)));
    }
    let principal = caller.principal.clone();
    Ok(with_group(
        shard,
        key::OFFSET_FETCH,
        name.clone(),
        error_only,
        move |shard, _group| async move {
            let stored = match ask(&shard, KafkaGroupOp::Offsets { group: name }).await {
                Ok(KafkaGroupAnswer::Offsets(offsets)) => offsets,
                Ok(_) => Vec::new(),
                Err(error) => return error_only(registry_code(&error)),
            };
            let topics = fetched(&shard, &principal, stored, wanted);
            fetch_body(version, code::NONE, &topics)
        },
    ))
}
