# The same kafka-python (3.x) script against ringlog's Kafka listener and
# against Apache Kafka 4.4: what it prints leaves out offset values (byte
# positions here, record counts there) and must be the same on both —
# records, keys, headers, timestamps, order, a lookup by time, a group's
# commit, and the errors of the same bad requests.
#
# python differential.py BOOTSTRAP
import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

bootstrap = sys.argv[1]
topic = "diff"
base_time = 1_700_000_000_000


def error_name(action):
    try:
        action()
        return "none"
    except Exception as e:  # the class name is what both brokers must agree on
        return type(e).__name__


admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
print("create again:", error_name(lambda: admin.create_topics([NewTopic(topic, 2, 1)])))
print("create bad name:", error_name(lambda: admin.create_topics([NewTopic("bad/name", 1, 1)])))
print("create no partitions:", error_name(lambda: admin.create_topics([NewTopic("zero", 0, 1)])))

producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=50)
futures = [
    producer.send(
        topic,
        key=b"k%d" % i,
        value=b"v%d" % i,
        partition=i % 2,
        headers=[("h", b"%d" % i), ("twice", b"a"), ("twice", b"b")],
        timestamp_ms=base_time + i,
    )
    for i in range(20)
]
producer.flush()
for f in futures:
    m = f.get(timeout=30)
    print("sent", m.partition, m.timestamp)
print("send to a partition that is not:", error_name(lambda: producer.send(topic, b"x", partition=7).get(timeout=10)))
producer.close()

partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000, auto_offset_reset="none")
consumer.assign(partitions)
consumer.seek_to_beginning()
# Each partition's records in their order (two partitions may come from
# two nodes, so the interleaving between them is not the broker's to keep).
records = sorted(consumer, key=lambda r: r.partition)
for r in records:
    print("read", r.partition, r.key, r.value, r.headers, r.timestamp, r.timestamp_type)

# The record for a time: the fifth of partition 0 is at base + 8.
found = consumer.offsets_for_times({partitions[0]: base_time + 7})[partitions[0]]
consumer.seek(partitions[0], found.offset)
record = next(iter(consumer))
print("by time", found.timestamp, record.value)
late = consumer.offsets_for_times({partitions[0]: base_time + 10_000})[partitions[0]]
print("by time past the end", late)

# A commit after seven records of partition 1 reads back as the position.
consumer.seek_to_beginning(partitions[1])
read = 0
for r in consumer:
    if r.partition == 1:
        read += 1
        if read == 7:
            break
position = consumer.position(partitions[1])
group = KafkaConsumer(bootstrap_servers=bootstrap, group_id="diff-group", enable_auto_commit=False)
group.commit({partitions[1]: OffsetAndMetadata(position, "meta", -1)})
committed = group.committed(partitions[1], metadata=True)
print("committed is the position", committed.offset == position, committed.metadata)
print("never committed", group.committed(partitions[0]))
group.close()

# Reading past the end with no reset policy.
end = consumer.end_offsets([partitions[0]])[partitions[0]]
consumer.seek(partitions[0], end + 1_000_000)


def poll_past_the_end():
    for _ in range(5):
        consumer.poll(timeout_ms=1000)


print("past the end:", error_name(poll_past_the_end))
consumer.close()

admin.delete_topics([topic])
print("deleted, listed:", topic in admin.list_topics())
print("delete again:", error_name(lambda: admin.delete_topics([topic])))
admin.close()
