//! Topic administration through the control thread: every shard takes
//! CreateTopic and DeleteTopic, and the control thread serialises them, so
//! racing creates of one name from different shards have exactly one winner.

use super::util::{create, producer, read_all};
use harness::{Broker, BrokerOptions};
use protocol::client::{AckMode, Client, OffsetSpec, TopicSettings};
use protocol::ErrorCode;
use std::time::Duration;

#[test]
fn racing_creates_of_one_name_on_every_shard_have_exactly_one_winner() {
    let broker = Broker::start(BrokerOptions::default());
    for round in 0..10 {
        let name = format!("race-{round}");
        let outcomes: Vec<Result<(), Option<ErrorCode>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = broker
                .shards
                .iter()
                .flat_map(|address| [address.clone(), address.clone()])
                .map(|address| {
                    let name = name.clone();
                    scope.spawn(move || {
                        let client = Client::connect(&address).unwrap();
                        client
                            .create_topic(&name, 3, &TopicSettings::default())
                            .map(|_| ())
                            .map_err(|e| e.code())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners = outcomes.iter().filter(|o| o.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .filter(|o| o.is_err())
                .all(|o| *o == Err(Some(ErrorCode::TopicAlreadyExists))),
            "round {round}: {outcomes:?}"
        );
    }
    let client = broker.client();
    assert_eq!(client.metadata(&[]).unwrap().topics.len(), 10);
}

#[test]
fn a_topic_created_through_any_shard_is_served_by_every_shard_and_survives_a_restart() {
    let mut broker = Broker::start(BrokerOptions::default());
    let last_shard = Client::connect(broker.shards.last().unwrap()).unwrap();
    create(&last_shard, "via-last", 4);
    let mut producer = producer(&last_shard, "via-last", AckMode::Flushed, 1);
    for p in 0..4u32 {
        producer
            .send_to(p, None, format!("m{p}").as_bytes())
            .unwrap();
    }
    producer.flush().unwrap();
    drop(producer);
    broker.stop();
    broker.restart();
    let client = broker.client();
    for p in 0..4u32 {
        let messages = read_all(&client, "via-last", p, 0);
        assert_eq!(messages.len(), 1, "partition {p}");
        assert_eq!(messages[0].value, format!("m{p}").as_bytes());
    }
    let error = client.delete_topic("never-made").unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownTopic), "{error}");
    client.delete_topic("via-last").unwrap();
    let error = client.metadata(&["via-last"]).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownTopic), "{error}");
}

/// Issue 8, item 5: a topic whose deletion was cut short by a crash (the
/// registry already without it, its directories still there) came back with
/// its old messages when the name was created again.
#[test]
fn r8_5_a_topic_deleted_during_a_crash_never_comes_back_and_its_data_is_moved_aside() {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "old", 2);
    create(&client, "kept", 1);
    let mut old = producer(&client, "old", AckMode::Flushed, 1);
    for p in 0..2u32 {
        old.send_to(p, None, b"old message").unwrap();
    }
    old.flush().unwrap();
    drop(old);
    drop(client);
    broker.stop();
    // The crash: the registry was rewritten without "old", the directories
    // were not removed yet.
    let registry = broker.data_dir().join("topics.toml");
    let text = std::fs::read_to_string(&registry).unwrap();
    let kept: Vec<&str> = text
        .split("[[topic]]")
        .filter(|t| !t.contains("\"old\""))
        .collect();
    std::fs::write(&registry, kept.join("[[topic]]")).unwrap();
    broker.restart();
    assert!(broker.log().contains("moved aside"), "{}", broker.log());
    let client = broker.client();
    create(&client, "old", 2);
    for p in 0..2u32 {
        assert_eq!(
            read_all(&client, "old", p, 0).len(),
            0,
            "partition {p} is new"
        );
    }
    assert_eq!(read_all(&client, "kept", 0, 0).len(), 0);
    // Moved aside with their names and data, not destroyed.
    let aside = harness::orphaned_dirs(&broker.data_dir());
    let names: Vec<&str> = aside
        .iter()
        .filter_map(|p| p.file_name()?.to_str())
        .filter(|n| n.starts_with("old-"))
        .collect();
    assert_eq!(names.len(), 2, "{aside:?}");
    // A normal delete leaves no directory behind, not even in the trash.
    client.delete_topic("old").unwrap();
    let left: Vec<String> = std::fs::read_dir(broker.data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n == "old-0" || n == "old-1")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The trash is emptied off the shard's thread, soon after the answer.
    harness::eventually(
        "the trash emptied",
        Duration::from_secs(20),
        || match std::fs::read_dir(broker.data_dir().join(".trash")).map_or(0, |d| d.count()) {
            0 => Ok(()),
            n => Err(format!("{n} entries")),
        },
    );
}

/// Issue 8, item 13: a topic deleted under a waiting acks=flushed produce
/// answered STORAGE_FAILED (a failed disk) instead of UNKNOWN_TOPIC.
#[test]
fn r8_13_a_produce_waiting_on_a_deleted_topic_gets_unknown_topic() {
    // Every fdatasync waits 2 s first: the flushed produce below is still
    // waiting for its acknowledgement when the delete arrives.
    let broker = Broker::start(BrokerOptions {
        faults: Some("sync_delay_ms=2000".into()),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    client
        .create_topic("doomed", 1, &TopicSettings::default())
        .unwrap();
    let metadata = client.metadata(&["doomed"]).unwrap();
    let mut conn =
        protocol::client::Connection::connect(&client.owner_address(&metadata, "doomed", 0))
            .unwrap();
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, b"waiting");
    let header =
        protocol::codec::produce_request(&mut conn.fbb, "doomed", 0, AckMode::Flushed).to_vec();
    conn.send(protocol::frame::Api::Produce, &header, &set)
        .unwrap();
    conn.flush().unwrap();
    client.delete_topic("doomed").unwrap();
    let error = conn.recv().unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownTopic), "{error}");
}

/// Issue 10, item 3: a long-poll Fetch waiting on a topic that is deleted
/// meanwhile is answered UNKNOWN_TOPIC (it used to get an empty chunk).
#[test]
fn a_fetch_waiting_on_a_deleted_topic_gets_unknown_topic() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "vanishing", 1);
    let metadata = client.metadata(&["vanishing"]).unwrap();
    let mut conn =
        protocol::client::Connection::connect(&client.owner_address(&metadata, "vanishing", 0))
            .unwrap();
    let header = protocol::codec::fetch_request(
        &mut conn.fbb,
        "vanishing",
        0,
        protocol::codec::FetchArgs {
            offset: 0,
            max_bytes: 1024,
            max_wait_ms: 30_000,
        },
    )
    .to_vec();
    conn.send(protocol::frame::Api::Fetch, &header, &[])
        .unwrap();
    conn.flush().unwrap();
    // The fetch is parked (nothing to read) when the delete arrives.
    client.delete_topic("vanishing").unwrap();
    let error = conn.recv().unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownTopic), "{error}");
}

/// `list_offsets` remembers where each partition lives instead of asking for
/// the topic's whole Metadata per call (O(partitions²) over a large topic),
/// and a remembered placement never answers for a topic that is gone: the
/// broker's UNKNOWN_TOPIC or NOT_OWNER sends it back to fresh Metadata.
#[test]
fn list_offsets_follows_a_deleted_and_re_created_topic() {
    let broker = Broker::start(BrokerOptions::default());
    let admin = broker.client();
    let lister = broker.client();
    let latest = |partition: u32| {
        lister
            .list_offsets("listed", partition, OffsetSpec::Latest, 0)
            .map(|(_, offsets)| offsets.end_offset)
    };
    create(&admin, "listed", 4);
    let mut sender = producer(&admin, "listed", AckMode::Flushed, 1);
    for p in 0..4u32 {
        sender
            .send_to(p, None, &vec![b'x'; p as usize + 1])
            .unwrap();
    }
    sender.flush().unwrap();
    drop(sender);
    for p in 0..4u32 {
        assert_eq!(latest(p).unwrap(), 9 + u64::from(p) + 1, "partition {p}");
    }

    admin.delete_topic("listed").unwrap();
    let error = latest(0).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownTopic), "{error}");

    create(&admin, "listed", 6);
    let mut sender = producer(&admin, "listed", AckMode::Flushed, 1);
    sender.send_to(5, None, b"abc").unwrap();
    sender.send_to(5, None, b"abc").unwrap();
    sender.flush().unwrap();
    for p in 0..5u32 {
        assert_eq!(latest(p).unwrap(), 0, "partition {p} of the new topic");
    }
    assert_eq!(latest(5).unwrap(), 2 * 12);
    let error = latest(6).unwrap_err();
    assert!(
        error.code().is_some(),
        "a partition past the topic: {error}"
    );
}

/// Issue 24, bug 1: a topic name of 226–249 characters could not be
/// deleted (`File name too long` moving its directories aside) and then
/// broke the next start. Every length from 220 to the limit of 249, one
/// of them with 1,000 partitions (four-digit directory suffixes), is
/// created, written, deleted, survives a restart, and can be created again.
#[test]
fn r24_1_topics_with_names_up_to_249_characters_and_1000_partitions_delete_and_restart() {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    let name = |len: usize| -> String { "n".repeat(len) };
    let lengths: Vec<usize> = (220..=249).collect();
    for &len in &lengths {
        let partitions = if len == 249 { 1_000 } else { 1 };
        client
            .create_topic(&name(len), partitions, &TopicSettings::default())
            .unwrap_or_else(|e| panic!("create {len}: {e}"));
    }
    let mut producer = producer(&client, &name(249), AckMode::Flushed, 10);
    for n in 0..2_000u64 {
        producer.send(None, &n.to_le_bytes()).unwrap();
    }
    producer.flush().unwrap();
    for &len in &lengths {
        client
            .delete_topic(&name(len))
            .unwrap_or_else(|e| panic!("delete {len}: {e}"));
    }
    broker.stop();
    broker.restart();
    let client = broker.client();
    let metadata = client.metadata(&[]).unwrap();
    assert!(metadata.topics.is_empty(), "{:?}", metadata.topics.len());
    for &len in &lengths {
        client
            .create_topic(&name(len), 2, &TopicSettings::default())
            .unwrap_or_else(|e| panic!("create again {len}: {e}"));
    }
    let again = client.metadata(&[]).unwrap().topics.len();
    assert_eq!(again, lengths.len());
    eprintln!(
        "names of {}..={} characters (1000 partitions at 249): deleted, restarted, created again: {again} topics",
        lengths[0],
        lengths[lengths.len() - 1]
    );
}
