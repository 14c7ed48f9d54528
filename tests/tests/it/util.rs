//! Helpers shared by the integration tests.

use protocol::client::{
    AckMode, Client, Consumer, OwnedMessage, Producer, ProducerConfig, TopicSettings,
};
use std::io::Write;
use std::net::TcpStream;
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
    // Room for the largest message the broker accepts by default.
    consumer.set_max_bytes(2 << 20);
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

/// A socket to `address` with a 30 s read timeout, before any handshake.
pub fn socket(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).unwrap_or_else(|e| panic!("connecting: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("read timeout: {e}"));
    stream
}

/// Sends a Handshake frame with this api version and request id, and reads
/// the answer.
pub fn handshake(
    stream: &mut TcpStream,
    api_version: u16,
    request_id: u32,
) -> Result<protocol::client::ResponseFrame, protocol::client::ClientError> {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let header = protocol::codec::handshake_request(&mut fbb, "raw").to_vec();
    call_raw(
        stream,
        protocol::frame::Api::Handshake,
        api_version,
        request_id,
        &header,
        &[],
    )
}

/// Writes one request frame on a raw socket and reads the next response.
pub fn call_raw(
    stream: &mut TcpStream,
    api: protocol::frame::Api,
    api_version: u16,
    request_id: u32,
    header: &[u8],
    payload: &[u8],
) -> Result<protocol::client::ResponseFrame, protocol::client::ClientError> {
    let mut out = Vec::new();
    protocol::frame::write_frame(
        &mut out,
        api as u16,
        api_version,
        request_id,
        header,
        payload,
    );
    stream
        .write_all(&out)
        .unwrap_or_else(|e| panic!("writing: {e}"));
    let mut response = protocol::client::ResponseFrame::default();
    protocol::client::read_response(stream, &mut response).map(|()| response)
}

/// A raw socket that has done the handshake.
pub fn raw(address: &str) -> TcpStream {
    let mut stream = socket(address);
    handshake(&mut stream, protocol::frame::API_VERSION, 0)
        .unwrap_or_else(|e| panic!("handshake: {e}"));
    stream
}

/// Sends one Produce of `set` on a raw, handshaken socket and reads its
/// answer (an acknowledgement, or the broker's error).
pub fn produce_raw(
    stream: &mut TcpStream,
    topic: &str,
    partition: u32,
    acks: AckMode,
    set: &[u8],
) -> Result<protocol::client::ResponseFrame, protocol::client::ClientError> {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let header = protocol::codec::produce_request(&mut fbb, topic, partition, acks).to_vec();
    call_raw(
        stream,
        protocol::frame::Api::Produce,
        protocol::frame::API_VERSION,
        7,
        &header,
        set,
    )
}

/// The broker's Prometheus text, from its metrics endpoint.
pub fn scrape(address: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap_or_else(|e| panic!("metrics: {e}"));
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .unwrap_or_else(|e| panic!("metrics: {e}"));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text)
        .unwrap_or_else(|e| panic!("metrics: {e}"));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

/// The sum over shards of a metric in `text`.
pub fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The sum of a metric over shards once it reaches `at_least` (the
/// endpoint publishes once a second), or its last value after 5 s.
pub fn metric_reaching(broker: &harness::Broker, name: &str, at_least: u64) -> u64 {
    let endpoint = broker
        .metrics
        .as_deref()
        .unwrap_or_else(|| panic!("the broker serves no metrics"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let value = metric(&scrape(endpoint), name);
        if value >= at_least || std::time::Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Segment files (`*.log`) in a partition directory of the broker's data dir.
pub fn segment_count(broker: &harness::Broker, dir: &str) -> usize {
    std::fs::read_dir(broker.data_dir().join(dir))
        .unwrap_or_else(|e| panic!("listing {dir}: {e}"))
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
        })
        .count()
}

/// One broker's Metadata of `topic`, asked once on a raw, handshaken
/// socket: no client-side retry or refresh that could hide a broker that
/// lags behind the others.
pub fn raw_metadata(
    stream: &mut TcpStream,
    topic: &str,
) -> Result<protocol::codec::Metadata, protocol::client::ClientError> {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let header = protocol::codec::metadata_request(&mut fbb, &[topic]).to_vec();
    let response = call_raw(
        stream,
        protocol::frame::Api::Metadata,
        protocol::frame::API_VERSION,
        9,
        &header,
        &[],
    )?;
    let decoded = protocol::codec::verify::<protocol::wire::MetadataResponse>(&response.header)
        .unwrap_or_else(|e| panic!("metadata response: {e}"));
    Ok(protocol::codec::decode_metadata(decoded))
}

/// Waits (up to a minute) until `client`'s broker lists `count` live
/// brokers.
pub fn wait_for_brokers(client: &Client, count: usize) {
    harness::eventually("the live brokers", Duration::from_secs(60), || {
        let seen = client
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        (seen == count)
            .then_some(())
            .ok_or(format!("{seen} brokers"))
    });
}
