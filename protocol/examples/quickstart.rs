//! A complete round trip with the Rust client: create a topic, produce with
//! flushed acknowledgements, consume it back, rewind.
//!
//! ```sh
//! broker --data-dir /tmp/ringlog-data &
//! cargo run -p ringlog-protocol --example quickstart -- 127.0.0.1:9092
//! ```

use protocol::client::{
    AckMode, Client, ClientError, Consumer, Producer, ProducerConfig, TopicSettings,
};
use protocol::ErrorCode;

fn main() -> Result<(), ClientError> {
    let brokers = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let client = Client::connect(&brokers)?;
    match client.create_topic("quickstart", 2, &TopicSettings::default()) {
        Ok(topic) => println!(
            "created {} with {} partitions",
            topic.name,
            topic.partitions.len()
        ),
        Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => {
            println!("topic exists; appending")
        }
        Err(e) => return Err(e),
    }
    let mut producer = Producer::new(
        &client,
        "quickstart",
        ProducerConfig {
            acks: AckMode::Flushed,
            ..ProducerConfig::default()
        },
    )?;
    // Keyed messages go to a partition chosen by the key's hash.
    let partition = producer.partition_for(Some(b"user-42"));
    for page in ["/home", "/search?q=kafka", "/cart"] {
        producer.send_to(partition, Some(b"user-42"), page.as_bytes())?;
    }
    producer.flush()?; // returns once every message is fsynced and visible
    let mut consumer = Consumer::new(&client, "quickstart", partition, 0)?;
    consumer.set_max_wait_ms(0);
    let mut first = None;
    loop {
        let messages = consumer.poll()?;
        if messages.is_empty() && consumer.at_end() {
            break;
        }
        for m in messages {
            first.get_or_insert(m.offset);
            println!(
                "partition {partition} offset {:>6}  {}",
                m.offset,
                String::from_utf8_lossy(&m.value)
            );
        }
    }
    // The broker keeps no consumer state: rewinding is just a seek.
    if let Some(offset) = first {
        consumer.seek(offset);
        println!(
            "rewound to {offset}: {} messages again",
            consumer.poll()?.len()
        );
    }
    Ok(())
}
