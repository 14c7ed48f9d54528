# kafka-python (3.x, its defaults: an idempotent producer) against
# ringlog's Kafka listener: produce COUNT records with keys and headers
# over the topic's two partitions, read them back with assign and
# seek_to_beginning, compare positions with end offsets, and look an
# offset up by time; one line per finding for
# tests/tests/it/kafka_listener.rs to check.
#
# python kafka_python_check.py BOOTSTRAP TOPIC COUNT
#
# With KAFKA_SSL_CA set (and KAFKA_SSL_CERT, KAFKA_SSL_KEY for a client
# certificate) it connects with TLS.
import os
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
tls = {}
if os.environ.get("KAFKA_SSL_CA"):
    tls = {
        "security_protocol": "SSL",
        "ssl_cafile": os.environ["KAFKA_SSL_CA"],
        "ssl_certfile": os.environ.get("KAFKA_SSL_CERT"),
        "ssl_keyfile": os.environ.get("KAFKA_SSL_KEY"),
    }
before = int(time.time() * 1000) - 1000
producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **tls)
futures = [
    producer.send(
        topic,
        key=b"k%d" % i,
        value=b"v%d" % i,
        partition=i % 2,
        headers=[("n", b"%d" % i)],
    )
    for i in range(count)
]
producer.flush()
sent = [f.get(timeout=30) for f in futures]
producer.close()
print("produced", len(sent))

consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    enable_auto_commit=False,
    consumer_timeout_ms=2000,
    **tls,
)
partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
consumer.assign(partitions)
consumer.seek_to_beginning()
read = wrong = 0
last = {}
for record in consumer:
    n = int(record.value[1:])
    ok = (
        record.key == b"k%d" % n
        and record.headers == [("n", b"%d" % n)]
        and sent[n].offset == record.offset
        and last.get(record.partition, -1) < n
    )
    wrong += 0 if ok else 1
    last[record.partition] = n
    read += 1
# The iteration ends after 2 s without records: by then the consumer has
# moved past each partition's last batch (a position after the last record
# alone would sit inside that batch's bytes, short of the end offset).
print("consumed", read, "wrong", wrong)
ends = consumer.end_offsets(partitions)
print("positions_at_end", all(consumer.position(tp) == ends[tp] for tp in partitions))
found = consumer.offsets_for_times({partitions[0]: before})[partitions[0]]
print("by_time", found.offset if found else -1, "first_offset", sent[0].offset)
consumer.close()
