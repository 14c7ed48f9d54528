# One member of a Kafka consumer group with kafka-python (3.x): subscribe,
# auto-commit every 500 ms, read slowly enough that a group of mixed
# clients is still reading when the test kills one. Prints "assigned
# P,P,…" at each assignment and "r PARTITION OFFSET VALUE" per record.
#
# python kafka_python_group.py BOOTSTRAP TOPIC GROUP
import sys
import time

from kafka import ConsumerRebalanceListener, KafkaConsumer

bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]


class Listener(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        print("assigned " + ",".join(sorted(str(tp.partition) for tp in assigned)), flush=True)


consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    group_id=group,
    client_id="python-member",
    auto_offset_reset="earliest",
    auto_commit_interval_ms=500,
    max_poll_records=7,
    session_timeout_ms=10000,
    heartbeat_interval_ms=1000,
)
consumer.subscribe([topic], listener=Listener())
while True:
    for tp, records in consumer.poll(timeout_ms=200).items():
        for r in records:
            print("r", r.partition, r.offset, r.value.decode(), flush=True)
    time.sleep(0.01)
