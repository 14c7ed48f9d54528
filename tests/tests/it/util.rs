//! Helpers shared by the integration tests.

use protocol::client::{
    AckMode, Client, Consumer, OwnedMessage, Producer, ProducerConfig, TopicSettings,
};
use std::time::Duration;

/// Creates a topic with default settings.
pub fn create(client: &Client, name: &str, partitions: u32) {
    client
        .create_topic(name, partitions, &TopicSettings::default())
        .unwrap_or_else(|e| panic!("creating {name}: {e}"));
}

/// A producer with the given ack mode and batch size.
pub fn producer(client: &Client, topic: &str, acks: AckMode, batch: usize) -> Producer {
    Producer::new(
        client,
        topic,
        ProducerConfig {
            acks,
            batch_messages: batch,
            linger: Duration::from_secs(60),
            ..ProducerConfig::default()
        },
    )
    .unwrap_or_else(|e| panic!("producer: {e}"))
}

/// Reads one partition from `offset` up to its flushed end.
pub fn read_all(client: &Client, topic: &str, partition: u32, offset: u64) -> Vec<OwnedMessage> {
    let mut consumer =
        Consumer::new(client, topic, partition, offset).unwrap_or_else(|e| panic!("consumer: {e}"));
    consumer.set_max_wait_ms(0);
    let mut out = Vec::new();
    loop {
        let batch = consumer
            .poll()
            .unwrap_or_else(|e| panic!("poll {topic}-{partition}: {e}"));
        if batch.is_empty() && consumer.at_end() {
            return out;
        }
        out.extend(batch);
    }
}
