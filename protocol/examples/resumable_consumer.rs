//! A consumer of one partition that resumes where its last run stopped:
//! its position is saved in a file after every poll.
//!
//! ```sh
//! cargo run -p ringlog-protocol --example resumable_consumer -- 127.0.0.1:9092 clicks 0 clicks-0.offsets
//! ```

use protocol::client::{Client, ClientError, Consumer, OffsetSpec, OffsetStore};

fn main() -> Result<(), ClientError> {
    let mut args = std::env::args().skip(1);
    let brokers = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = args.next().unwrap_or_else(|| "clicks".into());
    let partition: u32 = args.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let store = OffsetStore::new(
        args.next()
            .unwrap_or_else(|| format!("{topic}-{partition}.offsets")),
    );

    let client = Client::connect(&brokers)?;
    let mut consumer = match store.load()?.get(&partition) {
        Some(&offset) => Consumer::new(&client, &topic, partition, offset)?,
        None => Consumer::new_at(&client, &topic, partition, OffsetSpec::Earliest, 0)?,
    };
    println!("starting at offset {}", consumer.position());
    consumer.set_max_wait_ms(100);
    let mut read = 0u64;
    loop {
        let messages = consumer.poll()?;
        for m in &messages {
            println!("{} {}", m.offset, String::from_utf8_lossy(&m.value));
        }
        read += messages.len() as u64;
        // Saved after the messages are handled: a crash repeats at most
        // one poll's messages (at least once).
        store.save(&[(partition, consumer.position())].into_iter().collect())?;
        if messages.is_empty() && consumer.at_end() {
            break;
        }
    }
    println!(
        "read {read} messages; next run starts at {}",
        consumer.position()
    );
    Ok(())
}
