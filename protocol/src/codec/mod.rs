//! Encoding and verified decoding of the flatbuffer headers.
//!
//! Inbound headers are untrusted: [`verify`] runs the flatbuffers verifier with
//! bounded options before any field is read. Encoders build a header into a
//! reusable [`flatbuffers::FlatBufferBuilder`] and return its bytes.

use crate::generated::ringlog::wire;
use crate::types::{BrokerId, PartitionId, ShardId};
use flatbuffers::{
    FlatBufferBuilder, Follow, InvalidFlatbuffer, Verifiable, VerifierOptions, WIPOffset,
};

/// When the broker answers a Produce (PROTOCOL.md, Produce).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AckMode {
    /// No answer on success, the paper's fire-and-forget; a failure is
    /// answered with an error in the request's place.
    None,
    /// Once the set is written to the segment file (the page cache). The
    /// client's default: a crash of the broker machine may lose it.
    #[default]
    Written,
    /// Once the leader has fsynced the set: it survives the leader's crash.
    /// On one copy consumers see it at once; on a replicated partition it
    /// is the leader's word alone (Kafka's acks=1), and consumers see it
    /// once every in-sync copy has it (the high watermark), so a read right
    /// after the answer may miss it. The produce starts the flush (group
    /// commit), so it waits about one fdatasync.
    Flushed,
    /// Once every in-sync replica has flushed the set (the topic may relax
    /// it to written): it survives the loss of any replica but the last.
    /// Refused with NOT_ENOUGH_REPLICAS, before appending, while fewer than
    /// the topic's `min_insync_replicas` are in sync. On a partition with
    /// one copy it is `Flushed`.
    All,
}

impl AckMode {
    /// The wire value.
    pub fn to_wire(self) -> wire::AckMode {
        match self {
            AckMode::None => wire::AckMode::None,
            AckMode::Written => wire::AckMode::Written,
            AckMode::Flushed => wire::AckMode::Flushed,
            AckMode::All => wire::AckMode::All,
        }
    }

    /// From the wire value; `None` for a value this version does not know.
    pub fn from_wire(value: wire::AckMode) -> Option<AckMode> {
        match value {
            wire::AckMode::None => Some(AckMode::None),
            wire::AckMode::Written => Some(AckMode::Written),
            wire::AckMode::Flushed => Some(AckMode::Flushed),
            wire::AckMode::All => Some(AckMode::All),
            _ => None,
        }
    }
}

/// Which offset ListOffsets returns (PROTOCOL.md, ListOffsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffsetSpec {
    /// The first retained offset.
    Earliest,
    /// The flushed end: where a consumer of only new messages starts.
    Latest,
    /// The first offset of the earliest segment appended to at or after the
    /// request's `timestamp_ms` (segment granularity, as in the paper).
    BeforeTime,
}

impl OffsetSpec {
    /// The wire value.
    pub fn to_wire(self) -> wire::OffsetSpec {
        match self {
            OffsetSpec::Earliest => wire::OffsetSpec::Earliest,
            OffsetSpec::Latest => wire::OffsetSpec::Latest,
            OffsetSpec::BeforeTime => wire::OffsetSpec::BeforeTime,
        }
    }

    /// From the wire value; `None` for a value this version does not know.
    pub fn from_wire(value: wire::OffsetSpec) -> Option<OffsetSpec> {
        match value {
            wire::OffsetSpec::Earliest => Some(OffsetSpec::Earliest),
            wire::OffsetSpec::Latest => Some(OffsetSpec::Latest),
            wire::OffsetSpec::BeforeTime => Some(OffsetSpec::BeforeTime),
            _ => None,
        }
    }
}

mod decode_error;
pub mod digest;
pub mod failback;
pub mod groups;
pub mod multi_fetch;
pub mod operations;
pub mod orphans;
pub mod producer_id;
pub mod quotas;
pub mod security;
pub mod topic_config;

pub use decode_error::DecodeError;

/// Verifies `bytes` as a flatbuffer whose root is `T` and returns the root.
///
/// The limits keep a hostile header from costing more than a few microseconds:
/// headers are small (a topic list at most), so 64 levels, 100k tables and
/// 16 MiB of apparent size are generous for honest peers.
pub fn verify<'a, T>(bytes: &'a [u8]) -> Result<T::Inner, InvalidFlatbuffer>
where
    T: Follow<'a> + Verifiable + 'a,
{
    let options = VerifierOptions {
        max_depth: 64,
        max_tables: 100_000,
        max_apparent_size: 16 * 1024 * 1024,
        ignore_missing_null_terminator: false,
    };
    flatbuffers::root_with_opts::<T>(&options, bytes)
}

/// A topic's settings. Zero means "the broker's default" when creating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicSettings {
    /// Delete closed segments older than this.
    pub retention_ms: u64,
    /// Delete the oldest closed segments while the partition is larger (0 = no limit).
    pub retention_bytes: u64,
    /// Roll to a new segment at this size.
    pub segment_bytes: u64,
    /// Flush after this many messages...
    pub flush_messages: u64,
    /// ...or this long after the first unflushed message, whichever is first.
    pub flush_interval_ms: u64,
    /// Copies of each partition (0 = the broker's default).
    pub replication_factor: u32,
    /// Fewest in-sync replicas acks=all accepts (0 = the broker's default).
    pub min_insync_replicas: u32,
    /// Replicated: acks=all and consumers count what every in-sync replica
    /// has written instead of flushed (false, the default: flushed).
    pub write_caching: bool,
    /// What the logs store: 1 messages, 2 record batches v2 (0 = the
    /// broker's default). Fixed at creation.
    pub message_format: u32,
    /// Format 2's timestamps: 1 CreateTime (the producer's), 2
    /// LogAppendTime (the broker's); 0 = CreateTime.
    pub timestamp_type: u32,
}

impl TopicSettings {
    fn encode<'b>(&self, fbb: &mut FlatBufferBuilder<'b>) -> WIPOffset<wire::TopicConfig<'b>> {
        wire::TopicConfig::create(
            fbb,
            &wire::TopicConfigArgs {
                retention_ms: self.retention_ms,
                retention_bytes: self.retention_bytes,
                segment_bytes: self.segment_bytes,
                flush_messages: self.flush_messages,
                flush_interval_ms: self.flush_interval_ms,
                replication_factor: self.replication_factor,
                min_insync_replicas: self.min_insync_replicas,
                write_caching: self.write_caching,
                message_format: self.message_format,
                timestamp_type: self.timestamp_type,
            },
        )
    }

    /// Reads settings from a decoded header (absent = all defaults).
    pub fn decode(config: Option<wire::TopicConfig<'_>>) -> TopicSettings {
        config.map_or_else(TopicSettings::default, |c| TopicSettings {
            retention_ms: c.retention_ms(),
            retention_bytes: c.retention_bytes(),
            segment_bytes: c.segment_bytes(),
            flush_messages: c.flush_messages(),
            flush_interval_ms: c.flush_interval_ms(),
            replication_factor: c.replication_factor(),
            min_insync_replicas: c.min_insync_replicas(),
            write_caching: c.write_caching(),
            message_format: c.message_format(),
            timestamp_type: c.timestamp_type(),
        })
    }
}

/// One partition's placement.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionPlacement {
    /// The partition.
    pub partition: PartitionId,
    /// The broker to send its Produce and Fetch to: the one that stores it,
    /// or, replicated, its leader.
    pub broker_id: BrokerId,
    /// The shard that owns it.
    pub shard_id: ShardId,
    /// The leader's epoch; -1 for a partition with one copy.
    pub leader_epoch: i32,
    /// The brokers with a copy, the preferred leader first (empty: one copy,
    /// on `broker_id`).
    pub replicas: Vec<BrokerId>,
    /// Those in sync with the leader.
    pub isr: Vec<BrokerId>,
    /// While it moves, the replica set it is moving to (empty otherwise).
    pub moving_to: Vec<BrokerId>,
}

/// A topic as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The name.
    pub name: String,
    /// Every partition, in order.
    pub partitions: Vec<PartitionPlacement>,
    /// Effective settings.
    pub settings: TopicSettings,
    /// What the topic itself sets (0: the broker's default applies).
    pub overrides: TopicSettings,
    /// Unique per creation: a topic deleted and created again under this
    /// name has another. Empty from a broker older than topic ids.
    pub id: String,
    /// A mirror's target topic: where it is mirrored from (empty: an
    /// ordinary topic).
    pub mirror_source: String,
    /// A promoted copy: the `mirror_source` it had (empty: never a copy,
    /// or promoted by a broker older than this).
    pub promoted_from: String,
    /// A promoted copy: where each partition's copy ended at the
    /// promotion, by partition (empty: not recorded).
    pub promoted_ends: Vec<u64>,
}

/// A shard's listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardAddress {
    /// The shard.
    pub shard_id: ShardId,
    /// Host to connect to.
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// A broker and its shard ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMetadata {
    /// The broker's id.
    pub broker_id: BrokerId,
    /// One entry per shard.
    pub shards: Vec<ShardAddress>,
    /// Its rack, if it was given one.
    pub rack: Option<String>,
}

/// A whole Metadata response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metadata {
    /// Brokers in the cluster.
    pub brokers: Vec<BrokerMetadata>,
    /// Topics asked for (all when none were named).
    pub topics: Vec<TopicMetadata>,
    /// The cluster's id (a standalone broker's own; empty from a broker
    /// older than cluster ids).
    pub cluster_id: String,
}

impl Metadata {
    /// The address of the shard that owns a partition, if known.
    pub fn owner_address(&self, topic: &str, partition: PartitionId) -> Option<&ShardAddress> {
        let topic = self.topics.iter().find(|t| t.name == topic)?;
        let placement = topic.partitions.iter().find(|p| p.partition == partition)?;
        let broker = self
            .brokers
            .iter()
            .find(|b| b.broker_id == placement.broker_id)?;
        broker
            .shards
            .iter()
            .find(|s| s.shard_id == placement.shard_id)
    }
}

fn finish<'b, T>(fbb: &'b mut FlatBufferBuilder<'_>, root: WIPOffset<T>) -> &'b [u8] {
    fbb.finish_minimal(root);
    fbb.finished_data()
}

fn encode_topic<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    topic: &TopicMetadata,
) -> WIPOffset<wire::TopicInfo<'b>> {
    let name = fbb.create_string(&topic.name);
    let partitions: Vec<_> = topic
        .partitions
        .iter()
        .map(|p| {
            let replicas = (!p.replicas.is_empty()).then(|| fbb.create_vector(&p.replicas));
            let isr = (!p.isr.is_empty()).then(|| fbb.create_vector(&p.isr));
            let moving_to = (!p.moving_to.is_empty()).then(|| fbb.create_vector(&p.moving_to));
            wire::PartitionInfo::create(
                fbb,
                &wire::PartitionInfoArgs {
                    partition: p.partition,
                    broker_id: p.broker_id,
                    shard_id: p.shard_id,
                    leader_epoch: p.leader_epoch,
                    replicas,
                    isr,
                    moving_to,
                },
            )
        })
        .collect();
    let partitions = fbb.create_vector(&partitions);
    let config = topic.settings.encode(fbb);
    let overrides = topic.overrides.encode(fbb);
    let id = (!topic.id.is_empty()).then(|| fbb.create_string(&topic.id));
    let mirror_source =
        (!topic.mirror_source.is_empty()).then(|| fbb.create_string(&topic.mirror_source));
    let promoted_from =
        (!topic.promoted_from.is_empty()).then(|| fbb.create_string(&topic.promoted_from));
    let promoted_ends =
        (!topic.promoted_ends.is_empty()).then(|| fbb.create_vector(&topic.promoted_ends));
    wire::TopicInfo::create(
        fbb,
        &wire::TopicInfoArgs {
            name: Some(name),
            partitions: Some(partitions),
            config: Some(config),
            id,
            mirror_source,
            promoted_from,
            promoted_ends,
            overrides: Some(overrides),
        },
    )
}

/// Reads a decoded TopicInfo into its owned form.
pub fn decode_topic(info: wire::TopicInfo<'_>) -> TopicMetadata {
    TopicMetadata {
        name: info.name().unwrap_or_default().to_string(),
        partitions: info
            .partitions()
            .map(|ps| {
                ps.iter()
                    .map(|p| PartitionPlacement {
                        partition: p.partition(),
                        broker_id: p.broker_id(),
                        shard_id: p.shard_id(),
                        leader_epoch: p.leader_epoch(),
                        replicas: p.replicas().map(|r| r.iter().collect()).unwrap_or_default(),
                        isr: p.isr().map(|r| r.iter().collect()).unwrap_or_default(),
                        moving_to: p
                            .moving_to()
                            .map(|r| r.iter().collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        settings: TopicSettings::decode(info.config()),
        overrides: TopicSettings::decode(info.overrides()),
        id: info.id().unwrap_or_default().to_string(),
        mirror_source: info.mirror_source().unwrap_or_default().to_string(),
        promoted_from: info.promoted_from().unwrap_or_default().to_string(),
        promoted_ends: info
            .promoted_ends()
            .map(|e| e.iter().collect())
            .unwrap_or_default(),
    }
}

/// Reads a decoded MetadataResponse into its owned form.
pub fn decode_metadata(response: wire::MetadataResponse<'_>) -> Metadata {
    Metadata {
        brokers: response
            .brokers()
            .map(|bs| {
                bs.iter()
                    .map(|b| BrokerMetadata {
                        broker_id: b.broker_id(),
                        shards: b
                            .shards()
                            .map(|ss| {
                                ss.iter()
                                    .map(|s| ShardAddress {
                                        shard_id: s.shard_id(),
                                        host: s.host().unwrap_or_default().to_string(),
                                        port: s.port(),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        rack: b.rack().map(str::to_string),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        topics: response
            .topics()
            .map(|ts| ts.iter().map(decode_topic).collect())
            .unwrap_or_default(),
        cluster_id: response.cluster_id().unwrap_or_default().to_string(),
    }
}

// ---------------------------------------------------------------- requests

/// Handshake request header.
pub fn handshake_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, client_name: &str) -> &'b [u8] {
    handshake(fbb, client_name, None, false)
}

/// Handshake request header with all its options: a login's mechanism and
/// first message, and whether later answers should carry the throttle time
/// in their frames.
pub fn handshake<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    client_name: &str,
    login: Option<(&str, &[u8])>,
    throttle_in_frames: bool,
) -> &'b [u8] {
    fbb.reset();
    let name = fbb.create_string(client_name);
    let (sasl_mechanism, sasl_bytes) = match login {
        Some((mechanism, first)) => (
            Some(fbb.create_string(mechanism)),
            Some(fbb.create_vector(first)),
        ),
        None => (None, None),
    };
    let root = wire::HandshakeRequest::create(
        fbb,
        &wire::HandshakeRequestArgs {
            protocol_version: crate::frame::PROTOCOL_VERSION,
            client_name: Some(name),
            sasl_mechanism,
            sasl_bytes,
            throttle_in_frames,
        },
    );
    finish(fbb, root)
}

/// Metadata request header (an empty list asks for every topic).
pub fn metadata_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, topics: &[&str]) -> &'b [u8] {
    fbb.reset();
    let names: Vec<_> = topics.iter().map(|t| fbb.create_string(t)).collect();
    let topics = fbb.create_vector(&names);
    let root = wire::MetadataRequest::create(
        fbb,
        &wire::MetadataRequestArgs {
            topics: Some(topics),
        },
    );
    finish(fbb, root)
}

/// CreateTopic request header.
pub fn create_topic_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    name: &str,
    partitions: u32,
    settings: &TopicSettings,
) -> &'b [u8] {
    create_mirror_topic_request(fbb, name, partitions, settings, "")
}

/// CreateTopic request header of a mirror's target topic, mirrored from
/// `mirror_source` (empty: an ordinary topic).
pub fn create_mirror_topic_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    name: &str,
    partitions: u32,
    settings: &TopicSettings,
    mirror_source: &str,
) -> &'b [u8] {
    fbb.reset();
    let name = fbb.create_string(name);
    let config = settings.encode(fbb);
    let mirror_source = (!mirror_source.is_empty()).then(|| fbb.create_string(mirror_source));
    let root = wire::CreateTopicRequest::create(
        fbb,
        &wire::CreateTopicRequestArgs {
            name: Some(name),
            partitions,
            config: Some(config),
            mirror_source,
        },
    );
    finish(fbb, root)
}

/// DeleteTopic request header.
pub fn delete_topic_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, name: &str) -> &'b [u8] {
    fbb.reset();
    let name = fbb.create_string(name);
    let root =
        wire::DeleteTopicRequest::create(fbb, &wire::DeleteTopicRequestArgs { name: Some(name) });
    finish(fbb, root)
}

/// Produce request header (the message set follows it in the frame).
pub fn produce_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    acks: AckMode,
) -> &'b [u8] {
    produce_request_of(fbb, topic, "", partition, acks)
}

/// Produce request header naming the topic's id too (empty: none), so a
/// topic deleted and created again under the name refuses it.
pub fn produce_request_of<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    topic_id: &str,
    partition: PartitionId,
    acks: AckMode,
) -> &'b [u8] {
    produce_request_at(fbb, topic, topic_id, partition, acks, -1)
}

/// Produce request header naming the topic's id and the leader epoch the
/// client knows (-1: unchecked).
pub fn produce_request_at<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    topic_id: &str,
    partition: PartitionId,
    acks: AckMode,
    leader_epoch: i32,
) -> &'b [u8] {
    produce_request_full(fbb, topic, topic_id, partition, acks, leader_epoch, None)
}

/// Where a mirror append goes: a source partition's chunk, copied verbatim
/// at the source's offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorAppend {
    /// The chunk's offset in the source (and so in the copy).
    pub offset: u64,
    /// The base offset of the source's segment the chunk lies in.
    pub segment_base: u64,
}

/// Produce request header of a mirror append (see [`MirrorAppend`]).
pub fn mirror_append_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    acks: AckMode,
    append: MirrorAppend,
    source: &str,
) -> &'b [u8] {
    produce_request_full(fbb, topic, "", partition, acks, -1, Some((append, source)))
}

fn produce_request_full<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    topic_id: &str,
    partition: PartitionId,
    acks: AckMode,
    leader_epoch: i32,
    mirror: Option<(MirrorAppend, &str)>,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let topic_id = (!topic_id.is_empty()).then(|| fbb.create_string(topic_id));
    let mirror_source = mirror
        .filter(|(_, source)| !source.is_empty())
        .map(|(_, source)| fbb.create_string(source));
    let mirror = mirror.map(|(append, _)| append);
    let root = wire::ProduceRequest::create(
        fbb,
        &wire::ProduceRequestArgs {
            topic: Some(topic),
            partition,
            acks: acks.to_wire(),
            topic_id,
            leader_epoch,
            mirror_offset: mirror.map_or(-1, |m| i64::try_from(m.offset).unwrap_or(i64::MAX)),
            mirror_segment_base: mirror.map_or(0, |m| m.segment_base),
            mirror_source,
        },
    );
    finish(fbb, root)
}

/// What a Fetch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchArgs {
    /// Where to start reading.
    pub offset: u64,
    /// Most bytes to return.
    pub max_bytes: u32,
    /// How long to wait when nothing is flushed at `offset` yet.
    pub max_wait_ms: u32,
}

/// Fetch request header.
pub fn fetch_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    args: FetchArgs,
) -> &'b [u8] {
    fetch_request_of(fbb, topic, "", partition, args)
}

/// Fetch request header naming the topic's id too (empty: none), so a
/// topic deleted and created again under the name refuses it.
pub fn fetch_request_of<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    topic_id: &str,
    partition: PartitionId,
    args: FetchArgs,
) -> &'b [u8] {
    replica_fetch_request(
        fbb,
        topic,
        topic_id,
        partition,
        args,
        &ReplicaFetch::consumer(),
    )
}

/// Who fetches, and what a follower knows of its own copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetch {
    /// The leader epoch the fetcher knows (-1: unchecked).
    pub leader_epoch: i32,
    /// A follower's broker id; -1 for a consumer.
    pub replica_id: i32,
    /// The follower's incarnation (its registration's).
    pub incarnation: String,
    /// The epoch of the last message the follower has (-1: none).
    pub last_fetched_epoch: i32,
    /// How far the follower's copy is flushed.
    pub flushed_offset: u64,
}

impl ReplicaFetch {
    /// A consumer's fetch: no replica, no epoch check.
    pub fn consumer() -> ReplicaFetch {
        ReplicaFetch {
            leader_epoch: -1,
            replica_id: -1,
            incarnation: String::new(),
            last_fetched_epoch: -1,
            flushed_offset: 0,
        }
    }
}

/// Fetch request header with the fetcher's replica fields.
pub fn replica_fetch_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    topic_id: &str,
    partition: PartitionId,
    args: FetchArgs,
    replica: &ReplicaFetch,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let topic_id = (!topic_id.is_empty()).then(|| fbb.create_string(topic_id));
    let incarnation =
        (!replica.incarnation.is_empty()).then(|| fbb.create_string(&replica.incarnation));
    let root = wire::FetchRequest::create(
        fbb,
        &wire::FetchRequestArgs {
            topic: Some(topic),
            partition,
            offset: args.offset,
            max_bytes: args.max_bytes,
            max_wait_ms: args.max_wait_ms,
            topic_id,
            leader_epoch: replica.leader_epoch,
            replica_id: replica.replica_id,
            replica_incarnation: incarnation,
            last_fetched_epoch: replica.last_fetched_epoch,
            replica_flushed_offset: replica.flushed_offset,
        },
    );
    finish(fbb, root)
}

/// ListOffsets request header.
pub fn list_offsets_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    spec: OffsetSpec,
    timestamp_ms: u64,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let root = wire::ListOffsetsRequest::create(
        fbb,
        &wire::ListOffsetsRequestArgs {
            topic: Some(topic),
            partition,
            spec: spec.to_wire(),
            timestamp_ms,
        },
    );
    finish(fbb, root)
}

// --------------------------------------------------------------- responses

/// Handshake response header.
/// `hello` is `None` while a login is under way: who the broker is comes
/// after the proof, in the AuthenticateResponse.
pub fn handshake_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    hello: Option<&BrokerHello<'_>>,
    login: HandshakeLogin<'_>,
    throttle_in_frames: bool,
) -> &'b [u8] {
    fbb.reset();
    let broker_version = hello.map(|h| fbb.create_string(h.broker_version));
    let sasl_bytes = login.next.map(|b| fbb.create_vector(b));
    let principal = fbb.create_string(login.principal);
    let root = wire::HandshakeResponse::create(
        fbb,
        &wire::HandshakeResponseArgs {
            protocol_version: crate::frame::PROTOCOL_VERSION,
            broker_id: hello.map_or(0, |h| h.broker_id),
            shard_id: hello.map_or(0, |h| h.shard_id),
            shard_count: hello.map_or(0, |h| h.shard_count),
            broker_version,
            sasl_bytes,
            principal: Some(principal),
            throttle_in_frames,
        },
    );
    finish(fbb, root)
}

/// Who the broker is, as a Handshake (or, after a login's proof, an
/// Authenticate) tells a client.
#[derive(Debug, Clone, Copy)]
pub struct BrokerHello<'a> {
    /// The broker's id.
    pub broker_id: BrokerId,
    /// The shard that owns the connection.
    pub shard_id: ShardId,
    /// The broker's shards.
    pub shard_count: u16,
    /// Its build: "VERSION (GIT_REVISION)".
    pub broker_version: &'a str,
}

/// A Handshake answer's login part.
#[derive(Debug, Clone, Copy, Default)]
pub struct HandshakeLogin<'a> {
    /// The mechanism's next message (SCRAM's server-first); `None`: no
    /// login under way.
    pub next: Option<&'a [u8]>,
    /// Who the connection acts as; empty while a login is under way.
    pub principal: &'a str,
}

/// What an error response carries beside its code and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorDetails {
    /// For OFFSET_OUT_OF_RANGE: the valid range `[start, end]`.
    pub range: Option<(u64, u64)>,
    /// For NOT_OWNER: the broker that stores the partition.
    pub owner_broker_id: Option<BrokerId>,
}

/// Error response header.
pub fn error_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    code: crate::ErrorCode,
    message: &str,
    details: ErrorDetails,
) -> &'b [u8] {
    fbb.reset();
    let message = fbb.create_string(message);
    let (start_offset, end_offset) = details.range.unwrap_or((0, 0));
    let root = wire::ErrorResponse::create(
        fbb,
        &wire::ErrorResponseArgs {
            code: code as u16,
            message: Some(message),
            start_offset,
            end_offset,
            owner_broker_id: details.owner_broker_id.unwrap_or(0),
        },
    );
    finish(fbb, root)
}

/// Metadata response header.
pub fn metadata_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, metadata: &Metadata) -> &'b [u8] {
    fbb.reset();
    let brokers: Vec<_> = metadata
        .brokers
        .iter()
        .map(|b| {
            let shards: Vec<_> = b
                .shards
                .iter()
                .map(|s| {
                    let host = fbb.create_string(&s.host);
                    wire::ShardInfo::create(
                        fbb,
                        &wire::ShardInfoArgs {
                            shard_id: s.shard_id,
                            host: Some(host),
                            port: s.port,
                        },
                    )
                })
                .collect();
            let shards = fbb.create_vector(&shards);
            let rack = b.rack.as_deref().map(|r| fbb.create_string(r));
            wire::BrokerInfo::create(
                fbb,
                &wire::BrokerInfoArgs {
                    broker_id: b.broker_id,
                    shards: Some(shards),
                    rack,
                },
            )
        })
        .collect();
    let brokers = fbb.create_vector(&brokers);
    let topics: Vec<_> = metadata
        .topics
        .iter()
        .map(|t| encode_topic(fbb, t))
        .collect();
    let topics = fbb.create_vector(&topics);
    let cluster_id =
        (!metadata.cluster_id.is_empty()).then(|| fbb.create_string(&metadata.cluster_id));
    let root = wire::MetadataResponse::create(
        fbb,
        &wire::MetadataResponseArgs {
            brokers: Some(brokers),
            topics: Some(topics),
            cluster_id,
        },
    );
    finish(fbb, root)
}

/// CreateTopic response header.
pub fn create_topic_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &TopicMetadata,
) -> &'b [u8] {
    fbb.reset();
    let topic = encode_topic(fbb, topic);
    let root = wire::CreateTopicResponse::create(
        fbb,
        &wire::CreateTopicResponseArgs { topic: Some(topic) },
    );
    finish(fbb, root)
}

/// DeleteTopic response header.
pub fn delete_topic_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, name: &str) -> &'b [u8] {
    fbb.reset();
    let name = fbb.create_string(name);
    let root =
        wire::DeleteTopicResponse::create(fbb, &wire::DeleteTopicResponseArgs { name: Some(name) });
    finish(fbb, root)
}

/// Produce response header.
pub fn produce_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    base_offset: u64,
    end_offset: u64,
    message_count: u32,
) -> &'b [u8] {
    fbb.reset();
    let root = wire::ProduceResponse::create(
        fbb,
        &wire::ProduceResponseArgs {
            base_offset,
            end_offset,
            message_count,
            throttle_ms: 0,
        },
    );
    finish(fbb, root)
}

/// Offsets reported with fetches and offset listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionOffsets {
    /// First retained offset.
    pub start_offset: u64,
    /// Everything below this is flushed and visible.
    pub flushed_offset: u64,
    /// The offset the next appended message gets.
    pub end_offset: u64,
}

/// Fetch response header (`length` raw log bytes of `message_format`
/// follow it).
pub fn fetch_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    offset: u64,
    length: u32,
    offsets: PartitionOffsets,
    message_format: u32,
) -> &'b [u8] {
    let replica = FetchedReplica {
        message_format,
        ..FetchedReplica::default()
    };
    replica_fetch_response(fbb, offset, length, offsets, &replica)
}

/// What a follower's fetch answer tells it besides the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedReplica {
    /// The leader's epoch (-1: not replicated).
    pub leader_epoch: i32,
    /// The epoch every byte of the chunk was written in.
    pub chunk_epoch: i32,
    /// The base offset of the leader's segment the chunk lies in.
    pub segment_base: u64,
    /// When the follower diverged: the epoch and the offset to truncate to.
    pub diverging: Option<(i32, u64)>,
    /// What the chunk holds: 2 record batches v2, else messages.
    pub message_format: u32,
}

impl Default for FetchedReplica {
    fn default() -> Self {
        FetchedReplica {
            leader_epoch: -1,
            chunk_epoch: -1,
            segment_base: 0,
            diverging: None,
            message_format: 0,
        }
    }
}

/// Fetch response header with the replica fields.
pub fn replica_fetch_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    offset: u64,
    length: u32,
    offsets: PartitionOffsets,
    replica: &FetchedReplica,
) -> &'b [u8] {
    fbb.reset();
    let (diverging_epoch, diverging_end_offset) = replica.diverging.unwrap_or((-1, 0));
    let root = wire::FetchResponse::create(
        fbb,
        &wire::FetchResponseArgs {
            offset,
            length,
            start_offset: offsets.start_offset,
            flushed_offset: offsets.flushed_offset,
            leader_epoch: replica.leader_epoch,
            chunk_epoch: replica.chunk_epoch,
            segment_base: replica.segment_base,
            diverging_epoch,
            diverging_end_offset,
            throttle_ms: 0,
            message_format: replica.message_format,
        },
    );
    finish(fbb, root)
}

/// A Produce, Fetch or MultiFetch answer's header again, with
/// `throttle_ms` set (a quota's delay, decided once the answer is known).
/// `None` for a header of another api or that does not verify.
pub fn with_throttle(api: crate::frame::Api, header: &[u8], throttle_ms: u32) -> Option<Vec<u8>> {
    use crate::frame::Api;
    let mut fbb = FlatBufferBuilder::with_capacity(header.len() + 64);
    match api {
        Api::Produce => {
            let r = verify::<wire::ProduceResponse>(header).ok()?;
            let root = wire::ProduceResponse::create(
                &mut fbb,
                &wire::ProduceResponseArgs {
                    base_offset: r.base_offset(),
                    end_offset: r.end_offset(),
                    message_count: r.message_count(),
                    throttle_ms,
                },
            );
            Some(finish(&mut fbb, root).to_vec())
        }
        Api::Fetch => {
            let r = verify::<wire::FetchResponse>(header).ok()?;
            let root = wire::FetchResponse::create(
                &mut fbb,
                &wire::FetchResponseArgs {
                    offset: r.offset(),
                    length: r.length(),
                    start_offset: r.start_offset(),
                    flushed_offset: r.flushed_offset(),
                    leader_epoch: r.leader_epoch(),
                    chunk_epoch: r.chunk_epoch(),
                    segment_base: r.segment_base(),
                    diverging_epoch: r.diverging_epoch(),
                    diverging_end_offset: r.diverging_end_offset(),
                    throttle_ms,
                    message_format: r.message_format(),
                },
            );
            Some(finish(&mut fbb, root).to_vec())
        }
        Api::MultiFetch => {
            let r = verify::<wire::MultiFetchResponse>(header).ok()?;
            let total: usize = r
                .partitions()
                .iter()
                .flatten()
                .map(|p| p.length() as usize)
                .sum();
            let parts: Vec<multi_fetch::FetchedPart> =
                multi_fetch::decode_multi_fetch_response(header, total)
                    .ok()?
                    .into_iter()
                    .map(|(part, _)| part)
                    .collect();
            Some(
                multi_fetch::multi_fetch_response_throttled(&mut fbb, &parts, throttle_ms).to_vec(),
            )
        }
        _ => None,
    }
}

/// ListOffsets response header.
pub fn list_offsets_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    offset: u64,
    offsets: PartitionOffsets,
) -> &'b [u8] {
    fbb.reset();
    let root = wire::ListOffsetsResponse::create(
        fbb,
        &wire::ListOffsetsResponseArgs {
            offset,
            start_offset: offsets.start_offset,
            flushed_offset: offsets.flushed_offset,
            end_offset: offsets.end_offset,
        },
    );
    finish(fbb, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_time_is_set_into_each_answer_that_carries_one() {
        use crate::frame::Api;
        let mut fbb = FlatBufferBuilder::new();
        let produced = produce_response(&mut fbb, 10, 20, 3).to_vec();
        let header = with_throttle(Api::Produce, &produced, 750).unwrap();
        let r = verify::<wire::ProduceResponse>(&header).unwrap();
        assert_eq!(
            (
                r.base_offset(),
                r.end_offset(),
                r.message_count(),
                r.throttle_ms()
            ),
            (10, 20, 3, 750)
        );
        let offsets = PartitionOffsets {
            start_offset: 1,
            flushed_offset: 2,
            end_offset: 3,
        };
        let fetched = fetch_response(&mut fbb, 5, 7, offsets, 2).to_vec();
        let header = with_throttle(Api::Fetch, &fetched, 9).unwrap();
        let r = verify::<wire::FetchResponse>(&header).unwrap();
        assert_eq!(
            (r.offset(), r.length(), r.flushed_offset(), r.throttle_ms()),
            (5, 7, 2, 9)
        );
        let mut part = multi_fetch::FetchedPart::empty("t", 3, 40);
        part.length = 12;
        let multi = multi_fetch::multi_fetch_response(&mut fbb, &[part.clone()]).to_vec();
        let header = with_throttle(Api::MultiFetch, &multi, 11).unwrap();
        let r = verify::<wire::MultiFetchResponse>(&header).unwrap();
        assert_eq!(r.throttle_ms(), 11);
        let parts = multi_fetch::decode_multi_fetch_response(&header, 12).unwrap();
        assert_eq!(parts[0].0, part);
        assert_eq!(with_throttle(Api::Metadata, &produced, 1), None);
        assert_eq!(with_throttle(Api::Produce, b"junk", 1), None);
    }

    #[test]
    fn metadata_round_trips() {
        let metadata = Metadata {
            brokers: vec![BrokerMetadata {
                broker_id: 3,
                shards: vec![ShardAddress {
                    shard_id: 1,
                    host: "127.0.0.1".into(),
                    port: 9093,
                }],
                rack: Some("eu-1a".into()),
            }],
            topics: vec![TopicMetadata {
                name: "t".into(),
                partitions: vec![PartitionPlacement {
                    partition: 0,
                    broker_id: 3,
                    shard_id: 1,
                    leader_epoch: 4,
                    replicas: vec![3, 1, 2, 4],
                    isr: vec![1, 3],
                    moving_to: vec![3, 2, 4],
                }],
                settings: TopicSettings {
                    retention_ms: 5,
                    ..TopicSettings::default()
                },
                overrides: TopicSettings {
                    retention_ms: 5,
                    ..TopicSettings::default()
                },
                id: "0123abcd".into(),
                mirror_source: "dc1/clicks".into(),
                promoted_from: "dc0/clicks (cluster 77, topic id 88)".into(),
                promoted_ends: vec![4096, 0],
            }],
            cluster_id: "5e1f".into(),
        };
        let mut fbb = FlatBufferBuilder::new();
        let bytes = metadata_response(&mut fbb, &metadata).to_vec();
        let decoded = decode_metadata(verify::<wire::MetadataResponse>(&bytes).unwrap());
        assert_eq!(decoded, metadata);
        assert_eq!(decoded.owner_address("t", 0).map(|s| s.port), Some(9093));
    }

    #[test]
    fn garbage_fails_verification() {
        assert!(verify::<wire::ProduceRequest>(&[0xff; 3]).is_err());
        assert!(verify::<wire::ProduceRequest>(&[0x40, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]).is_err());
    }
}
