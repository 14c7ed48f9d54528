//! Drivers for the paper's competitors (RabbitMQ, ActiveMQ) and today's
//! peers (NATS JetStream, Redis Streams), run side by side with ringlog by
//! `loadgen paper`. All come from Debian packages and are started on
//! loopback by `deploy/peers.sh`.

pub mod activemq;
pub mod nats;
pub mod rabbitmq;
pub mod redis_streams;

use std::path::Path;

/// Bytes allocated on disk under `dir` (st_blocks × 512, so preallocated
/// sparse journal files count only what they hold).
pub fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => allocated_bytes(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}
