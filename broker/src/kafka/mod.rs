//! Kafka's wire protocol as a second front end on the same shards
//! (`broker --kafka-listen`): Kafka's own clients — librdkafka and kcat,
//! the Java client, kafka-python, franz-go — produce to and fetch from
//! message-format-2 topics, whose batches *are* Kafka's record batch v2 at
//! ringlog's byte offsets (design record 0017). No offset is translated and
//! no fetched byte is copied: a Kafka offset is the byte position, and a
//! Fetch answer's records go out with sendfile between the fields around
//! them.
//!
//! Each shard is its own Kafka node, `broker_id × 1024 + shard`, on the
//! Kafka port + shard: Metadata names the owning shard of every partition's
//! leader, so a Kafka client talks to the core that holds the partition,
//! as ringlog's own clients do. A request for a partition another shard
//! owns is answered NOT_LEADER_OR_FOLLOWER, and the client looks again.
//!
//! | file | what |
//! |---|---|
//! | `front.rs` | the connection's front end: framing, request headers, dispatch, quotas |
//! | `sasl.rs` | SCRAM-SHA-256 logins (SaslHandshake, SaslAuthenticate) |
//! | `wire.rs` | Kafka's primitive types |
//! | `versions.rs` | the APIs and versions this listener speaks (ApiVersions) |
//! | `errors.rs` | ringlog's error codes as Kafka's |
//! | `group/` | consumer groups: a coordinator shard per group, its state machine, offsets |
//! | `metadata.rs`, `produce.rs`, `fetch.rs`, `list_offsets.rs`, `leader_epochs.rs`, `producer_id.rs`, `topics.rs`, `partitions.rs`, `configs.rs` | one request (or two) each |

pub mod configs;
pub mod errors;
pub mod fetch;
pub mod front;
pub mod group;
pub mod leader_epochs;
pub mod list_offsets;
pub mod metadata;
pub mod partitions;
pub mod produce;
pub mod producer_id;
pub mod sasl;
pub mod topics;
pub mod versions;
pub mod wire;

/// Kafka node ids per broker: shard `s` of broker `b` is node `b × 1024 + s`.
pub const NODES_PER_BROKER: i32 = crate::limits::KAFKA_NODES_PER_BROKER;

/// The Kafka node id of a broker's shard.
pub fn node_id(broker_id: u32, shard: u16) -> i32 {
    broker_id as i32 * NODES_PER_BROKER + i32::from(shard)
}
