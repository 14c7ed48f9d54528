//! Tails every partition of a topic with one consumer (one connection per
//! broker shard), until a count is reached or nothing arrives for a while —
//! another thread closes it through its waker.
//!
//! ```sh
//! cargo run -p ringlog-protocol --example tail_topic -- 127.0.0.1:9092 clicks [--earliest] [--count N] [--idle-ms MS]
//! ```

use protocol::client::{Client, ClientError, Start, TopicConsumer, TopicConsumerConfig};
use std::time::{Duration, Instant};

fn main() -> Result<(), ClientError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let brokers = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = args.get(1).cloned().unwrap_or_else(|| "clicks".into());
    let flag = |name: &str| args.iter().position(|a| a == name);
    let value = |name: &str| flag(name).and_then(|i| args.get(i + 1)?.parse::<u64>().ok());
    let start = if flag("--earliest").is_some() {
        Start::Earliest
    } else {
        Start::Latest
    };
    let count = value("--count").unwrap_or(u64::MAX);
    let idle = Duration::from_millis(value("--idle-ms").unwrap_or(5_000));

    let client = Client::connect(&brokers)?;
    let mut consumer = TopicConsumer::new(&client, &topic, start, TopicConsumerConfig::default())?;
    // A watchdog thread ends the tail when nothing arrived for `idle`.
    let waker = consumer.waker();
    let last = std::sync::Arc::new(std::sync::Mutex::new(Instant::now()));
    let seen = last.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(50));
        let quiet = seen.lock().map(|t| t.elapsed()).unwrap_or_default();
        if quiet >= idle {
            waker.close();
            return;
        }
    });
    let mut printed = 0u64;
    while printed < count && !consumer.is_closed() {
        for m in consumer.poll(Duration::from_secs(1))? {
            if printed == count {
                break;
            }
            println!(
                "{} {} {}",
                m.partition,
                m.offset,
                String::from_utf8_lossy(&m.value)
            );
            printed += 1;
            if let Ok(mut t) = last.lock() {
                *t = Instant::now();
            }
        }
    }
    eprintln!("{printed} messages; positions {:?}", consumer.positions());
    Ok(())
}
