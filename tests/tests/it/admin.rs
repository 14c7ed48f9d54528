//! Topic administration through the control thread: every shard takes
//! CreateTopic and DeleteTopic, and the control thread serialises them, so
//! racing creates of one name from different shards have exactly one winner.

use super::util::{create, producer, read_all};
use harness::{Broker, BrokerOptions};
use protocol::client::{AckMode, Client, TopicSettings};
use protocol::ErrorCode;

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
