"""The producer on a replicated topic, against the two-broker cluster the
Rust test (tests/it/python.rs) starts: acks="all", and a batch refused
with NOT_LEADER — sent where the leader is not, as after an election — goes
again to the leader from fresh Metadata."""

import os
import time
import uuid

import ringlog
from test_client import read_partition

CLUSTER = os.environ.get("RINGLOG_CLUSTER_BROKERS", "")


def test_acks_all_follows_not_leader_to_the_leader_and_loses_nothing():
    assert CLUSTER, "RINGLOG_CLUSTER_BROKERS names the cluster the Rust test started"
    client = ringlog.Client(CLUSTER)
    deadline = time.monotonic() + 30
    while len(client.metadata().brokers) < 2:
        assert time.monotonic() < deadline, "the cluster's second broker never registered"
        time.sleep(0.05)
    brokers = client.metadata().brokers
    assert len(brokers) == 2, brokers
    topic = "repl-" + uuid.uuid4().hex[:12]
    # Answered once the partition's leader serves it (the other broker
    # learns it from etcd a moment after the one that created it).
    client.create_topic(topic, partitions=1, replication_factor=2, min_insync_replicas=2)
    producer = ringlog.Producer(client, topic, acks="all", batch_messages=10)
    for i in range(100):
        producer.send(i.to_bytes(4, "little"), partition=0)
    assert producer.flush() == 100
    metadata = client.metadata([topic])
    leader = metadata.topics[topic].partitions[0].broker_id
    follower = next(b for b in metadata.brokers if b != leader)
    # A stale route: the follower answers NOT_LEADER, naming the leader.
    producer._owner[0] = metadata.brokers[follower][0]
    for i in range(100, 200):
        producer.send(i.to_bytes(4, "little"), partition=0)
    assert producer.flush() == 200
    assert producer.failed == 0
    assert producer.resent >= 1, "the refused batches were sent again"
    ids = [int.from_bytes(m.value, "little") for m in read_partition(client, topic, 0)]
    assert sorted(set(ids)) == list(range(200)), ids
