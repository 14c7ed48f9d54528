"""The group consumer against a cluster member (RINGLOG_CLUSTER_BROKERS,
started on a real etcd by tests/tests/it/python.rs)."""

import os
import threading
import time
import uuid

import pytest

import ringlog
from ringlog import BrokerError, ErrorCode
from ringlog.group import View, assignment

CLUSTER = os.environ.get("RINGLOG_CLUSTER_BROKERS", "")
BROKERS = os.environ.get("RINGLOG_BROKERS", "")
if not CLUSTER:
    raise RuntimeError("RINGLOG_CLUSTER_BROKERS must be set (tests/tests/it/python.rs sets it)")


def test_ranges_follow_the_spec():
    view = View(1, 1, [("b", ["t"]), ("a", ["t"]), ("c", ["t", "u"])], {"t": 7, "u": 2})
    assert assignment(view, "a", ["t"]) == {("t", 0), ("t", 1), ("t", 2)}
    assert assignment(view, "b", ["t"]) == {("t", 3), ("t", 4)}
    assert assignment(view, "c", ["t", "u"]) == {("t", 5), ("t", 6), ("u", 0), ("u", 1)}
    assert assignment(view, "z", ["t"]) == set()


class Member(threading.Thread):
    """A group member polling in its own thread (with its own client), as a
    real consumer process would."""

    def __init__(self, group, topic, seen, lock):
        super().__init__(daemon=True)
        self.group, self.topic, self.seen, self.lock = group, topic, seen, lock
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.assigned = []
        self.error = None

    def run(self):
        try:
            member = ringlog.GroupConsumer(
                ringlog.Client(CLUSTER), self.group, [self.topic], session_timeout_ms=6_000
            )
            self.ready.set()
            while not self.stop.is_set():
                for m in member.poll():
                    with self.lock:
                        self.seen.setdefault(m.value, []).append(m.partition)
                self.assigned = member.assigned()
                time.sleep(0.005)
            member.close()
        except Exception as e:  # reported by the test
            self.error = e
            self.ready.set()


def run_members(group, topic, count, until, seconds=60):
    seen, lock = {}, threading.Lock()
    members = []
    for _ in range(count):
        member = Member(group, topic, seen, lock)
        member.start()
        member.ready.wait(30)
        members.append(member)
    deadline = time.monotonic() + seconds
    try:
        while not until(seen, members):
            assert time.monotonic() < deadline, f"{len(seen)} read; {[m.assigned for m in members]}"
            assert not any(m.error for m in members), [m.error for m in members]
            time.sleep(0.01)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    assert not any(m.error for m in members), [m.error for m in members]
    return seen, members


def test_two_members_share_a_topic_and_a_third_resumes_from_the_commits():
    client = ringlog.Client(CLUSTER)
    topic = "py-group-" + uuid.uuid4().hex[:8]
    group = "g-" + uuid.uuid4().hex[:8]
    client.create_topic(topic, partitions=4)
    producer = ringlog.Producer(client, topic, acks="flushed")
    for i in range(2_000):
        producer.send(f"m{i}".encode(), partition=i % 4)
    producer.flush()

    def shared(seen, members):
        return len(seen) >= 2_000 and all(len(m.assigned) == 2 for m in members)

    seen, members = run_members(group, topic, 2, shared)
    assert set(members[0].assigned) | set(members[1].assigned) == {(topic, p) for p in range(4)}
    assert set(seen) == {f"m{i}".encode() for i in range(2_000)}
    duplicates = sum(len(v) - 1 for v in seen.values())

    # Everything read was committed on close: a new member reads only what
    # comes next, each message once.
    for i in range(100):
        producer.send(f"late{i}".encode(), partition=i % 4)
    producer.flush()
    late, _ = run_members(group, topic, 1, lambda seen, _: len(seen) >= 100)
    assert set(late) == {f"late{i}".encode() for i in range(100)}, "nothing earlier read again"
    assert all(len(v) == 1 for v in late.values())
    print(f"\ngroup: 2,000 messages over 2 members, {duplicates} read twice during the rebalance")


def test_a_standalone_broker_says_groups_need_a_cluster():
    client = ringlog.Client(BROKERS)
    topic = "py-" + uuid.uuid4().hex[:8]
    client.create_topic(topic)
    with pytest.raises(BrokerError) as e:
        ringlog.GroupConsumer(client, "g", [topic])
    assert e.value.code == ErrorCode.CLUSTER_REQUIRED
