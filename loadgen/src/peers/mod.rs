//! Drivers for the paper's competitors (RabbitMQ, ActiveMQ) and today's
//! peers (NATS JetStream, Redis Streams, Apache Kafka), run side by side
//! with ringlog by `loadgen paper`. The first four come from Debian
//! packages, Kafka's jars from Maven Central; `deploy/peers.sh` starts each
//! on loopback.

pub mod activemq;
pub mod kafka;
#[cfg(feature = "librdkafka")]
pub mod kafka_librdkafka;
pub mod nats;
pub mod rabbitmq;
pub mod redis_streams;

use std::path::Path;

/// Payloads that do not compress, each different: Redis stores a stream's
/// entries LZF-compressed (100 to a node) in its AOF base file, and
/// identical 200-byte payloads cost it 11–29 bytes a message on disk, which
/// says nothing about real ones.
#[derive(Debug)]
pub struct Payloads {
    state: u64,
    buf: Vec<u8>,
}

impl Payloads {
    /// Payloads of `size` bytes.
    pub fn new(size: usize) -> Payloads {
        Payloads {
            state: 0x9e37_79b9_7f4a_7c15,
            buf: vec![0; size],
        }
    }

    /// The next payload (xorshift64 output, 8 bytes per step).
    pub fn next_payload(&mut self) -> &[u8] {
        for chunk in self.buf.chunks_mut(8) {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let bytes = self.state.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        &self.buf
    }
}

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
