//! A keyed producer with flushed acknowledgements and a delivery report
//! per batch: every user's events land in one partition, in order.
//!
//! ```sh
//! cargo run -p ringlog-protocol --example keyed_producer -- 127.0.0.1:9092 clicks 10000
//! ```

use protocol::client::{
    AckMode, Client, ClientError, Outcome, Producer, ProducerConfig, Receipt, TopicSettings,
};
use protocol::ErrorCode;
use std::time::Duration;

fn main() -> Result<(), ClientError> {
    let mut args = std::env::args().skip(1);
    let brokers = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = args.next().unwrap_or_else(|| "clicks".into());
    let count: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);

    let client = Client::connect(&brokers)?;
    match client.create_topic(&topic, 4, &TopicSettings::default()) {
        Err(e) if e.code() != Some(ErrorCode::TopicAlreadyExists) => return Err(e),
        _ => {}
    }
    let mut producer = Producer::new(
        &client,
        &topic,
        ProducerConfig {
            acks: AckMode::Flushed,
            delivery_reports: true,
            ..ProducerConfig::default()
        },
    )?;
    let mut receipts: Vec<Receipt> = Vec::new();
    for i in 0..count {
        let key = format!("user-{}", i % 10);
        let value = format!("event {i}");
        receipts.push(producer.send(Some(key.as_bytes()), value.as_bytes())?);
    }
    // Waits for every acknowledgement (retrying through a broker restart),
    // then closes the connections.
    let flushed = producer.close(Duration::from_secs(30));
    let deliveries = producer.take_deliveries();
    let stored: u64 = deliveries
        .iter()
        .filter(|d| d.stored().is_some())
        .map(|d| u64::from(d.messages))
        .sum();
    println!(
        "stored {stored} of {} messages in {} batches",
        receipts.len(),
        deliveries.len()
    );
    for delivery in &deliveries {
        let lost = receipts.iter().filter(|r| delivery.covers(r)).count();
        match &delivery.outcome {
            Outcome::Stored(_) => {}
            Outcome::Failed(error) => eprintln!(
                "partition {}: {lost} messages not stored: {error}",
                delivery.partition
            ),
            // Its answer was lost: read the partition to know.
            Outcome::Unknown(error) => eprintln!(
                "partition {}: {lost} messages perhaps stored: {error}",
                delivery.partition
            ),
        }
    }
    flushed
}
