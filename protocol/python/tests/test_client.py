"""The Python client against the real broker binary.

Run by the Rust test suite (tests/tests/it/python.rs), which starts a broker
with two shards and sets RINGLOG_BROKERS (its address) and RINGLOG_CLI (the
`ringlog` binary). Each test uses its own topic.
"""

import os
import random
import subprocess
import time
import uuid

import pytest

import ringlog
from ringlog import BrokerError, ErrorCode

BROKERS = os.environ.get("RINGLOG_BROKERS", "")
CLI = os.environ.get("RINGLOG_CLI", "")

if not BROKERS or not CLI:
    raise RuntimeError(
        "RINGLOG_BROKERS and RINGLOG_CLI must be set: run these tests through "
        "`cargo nextest run -p ringlog-tests python` (tests/tests/it/python.rs)"
    )


@pytest.fixture
def client():
    with ringlog.Client(BROKERS) as c:
        yield c


def fresh_topic(client, partitions=1, **settings):
    name = "py-" + uuid.uuid4().hex[:12]
    client.create_topic(name, partitions=partitions, **settings)
    return name


def read_partition(client, topic, partition, max_bytes=1 << 20):
    consumer = ringlog.Consumer(client, topic, partition, 0, max_bytes=max_bytes, max_wait_ms=0)
    out = []
    while True:
        batch = consumer.poll()
        if not batch and consumer.at_end:
            return out
        out.extend(batch)


def test_round_trip_is_byte_exact_over_partitions_on_both_shards(client):
    topic = fresh_topic(client, partitions=4)
    info = client.describe_topic(topic)
    assert {p.shard_id for p in info.partitions} == {0, 1}, "partitions on both shards"
    rng = random.Random(7)
    producer = ringlog.Producer(client, topic, acks="written", batch_messages=50)
    sent = {p: [] for p in range(4)}
    for i in range(20_000):
        value = rng.randbytes(rng.choice([0, 1, 17, 200, 2000]))
        key = None if i % 3 else f"user-{i % 97}".encode()
        partition = producer.partition_for(key) if key is not None else i % 4
        producer.send(value, key=key, partition=partition)
        sent[partition].append((key, value))
    assert producer.flush() == 20_000
    for p in range(4):
        got = read_partition(client, topic, p)
        assert [(m.key, m.value) for m in got] == sent[p], f"partition {p}"
        # Offsets are byte positions: each is the previous plus its size.
        for a, b in zip(got, got[1:]):
            assert b.offset == a.offset + len(ringlog.encode_message(a.value, a.key))


def test_keys_map_to_partitions_as_the_rust_client_maps_them(client):
    # The Rust CLI places keyed lines; Python's fnv1a must agree with it.
    topic = fresh_topic(client, partitions=5)
    lines = [f"key-{i}=v{i}" for i in range(500)]
    subprocess.run(
        [CLI, "--brokers", BROKERS, "produce", topic, "--key-separator", "="],
        input="\n".join(lines).encode() + b"\n",
        check=True,
        capture_output=True,
        timeout=60,
    )
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 500 and time.monotonic() < deadline:
        seen = 0
        for p in range(5):
            for m in read_partition(client, topic, p):
                assert ringlog.partition_for_key(m.key, 5) == p, (m.key, p)
                seen += 1
    assert seen == 500
    # And Python's producer puts a key where Python's hash says.
    producer = ringlog.Producer(client, topic)
    assert producer.partition_for(b"key-7") == 4
    assert ringlog.fnv1a(b"key-7") == 8147958347810898444  # PROTOCOL.md's example


@pytest.mark.parametrize("acks", ["none", "written", "flushed", "all"])
def test_every_ack_mode_stores_every_message(client, acks):
    topic = fresh_topic(client, partitions=2)
    producer = ringlog.Producer(client, topic, acks=acks, batch_messages=10)
    for i in range(1_000):
        producer.send(i.to_bytes(4, "little"), partition=i % 2)
    assert producer.flush() == 1_000
    assert producer.failed == 0
    deadline = time.monotonic() + 30
    while True:
        counts = [len(read_partition(client, topic, p)) for p in range(2)]
        if counts == [500, 500] or time.monotonic() > deadline:
            break
        time.sleep(0.02)  # written and none become visible at the next flush
    assert counts == [500, 500]


def test_consumer_resumes_after_chunks_that_end_mid_message(client):
    topic = fresh_topic(client)
    producer = ringlog.Producer(client, topic, acks="flushed")
    for i in range(300):
        producer.send(bytes([i % 256]) * 200)
    producer.flush()
    got = read_partition(client, topic, 0, max_bytes=300)  # 1.4 messages a chunk
    assert [m.value for m in got] == [bytes([i % 256]) * 200 for i in range(300)]
    # Seek back to a message boundary and read again.
    consumer = ringlog.Consumer(client, topic, 0, got[150].offset, max_wait_ms=0)
    assert consumer.poll()[0].value == got[150].value
    consumer.seek(got[299].offset)
    assert [m.value for m in consumer.poll()] == [got[299].value]
    # Latest: nothing more to read.
    assert ringlog.Consumer(client, topic, 0, "latest", max_wait_ms=0).poll() == []


def test_a_message_larger_than_max_bytes_says_so(client):
    topic = fresh_topic(client)
    producer = ringlog.Producer(client, topic, acks="flushed")
    producer.send(b"x" * 5_000)
    producer.flush()
    consumer = ringlog.Consumer(client, topic, 0, 0, max_bytes=1_000, max_wait_ms=0)
    with pytest.raises(ringlog.RinglogError, match="raise the consumer's max_bytes"):
        consumer.poll()


def test_errors_carry_the_brokers_code(client):
    topic = fresh_topic(client)
    with pytest.raises(BrokerError) as e:
        client.create_topic(topic)
    assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(BrokerError) as e:
        client.create_topic("bad/name")
    assert e.value.code == ErrorCode.INVALID_TOPIC_NAME
    with pytest.raises(BrokerError) as e:
        client.create_topic("py-" + uuid.uuid4().hex[:8], partitions=0)
    assert e.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(BrokerError) as e:
        ringlog.Producer(client, "py-missing-" + uuid.uuid4().hex[:8])
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC
    with pytest.raises(BrokerError) as e:
        client.list_offsets(topic, 3)
    assert e.value.code == ErrorCode.UNKNOWN_PARTITION
    consumer = ringlog.Consumer(client, topic, 0, 10_000, max_wait_ms=0)
    with pytest.raises(BrokerError) as e:
        consumer.poll()
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert e.value.valid_range == (0, 0)
    assert not e.value.retriable
    client.delete_topic(topic)
    with pytest.raises(BrokerError) as e:
        client.describe_topic(topic)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC


def test_a_topic_gets_more_partitions_never_fewer(client):
    topic = fresh_topic(client, partitions=2)
    added = client.create_partitions(topic, 4)
    assert len(added) == 2
    assert len(client.describe_topic(topic).partitions) == 4
    producer = ringlog.Producer(client, topic, acks="flushed")
    producer.send(b"new", partition=3)
    producer.flush()
    assert [m.value for m in read_partition(client, topic, 3)] == [b"new"]
    assert client.create_partitions(topic, 4) == []
    with pytest.raises(BrokerError) as e:
        client.create_partitions(topic, 3)
    assert e.value.code == ErrorCode.INVALID_CONFIG
    assert "only goes up" in str(e.value)


def test_python_produces_and_the_cli_consumes(client):
    topic = fresh_topic(client, partitions=1)
    producer = ringlog.Producer(client, topic, acks="flushed")
    lines = [f"line {i} {'é' * (i % 5)}" for i in range(1_000)]
    for line in lines:
        producer.send(line.encode(), key=b"k" if len(line) % 2 else None)
    producer.flush()
    out = subprocess.run(
        [CLI, "--brokers", BROKERS, "consume", topic, "--exit-at-end"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert out.stdout.decode().splitlines() == lines


def test_the_cli_produces_and_python_consumes(client):
    topic = fresh_topic(client, partitions=1)
    lines = [f"user-{i}={i * i}" for i in range(1_000)]
    subprocess.run(
        [CLI, "--brokers", BROKERS, "produce", topic, "--key-separator", "=", "--acks", "flushed"],
        input="\n".join(lines).encode() + b"\n",
        check=True,
        capture_output=True,
        timeout=60,
    )
    got = read_partition(client, topic, 0)
    assert [(m.key, m.value) for m in got] == [
        (l.split("=")[0].encode(), l.split("=")[1].encode()) for l in lines
    ]


def test_throughput_figure(client):
    topic = fresh_topic(client, partitions=2)
    producer = ringlog.Producer(client, topic, acks="written", batch_messages=200)
    value = b"x" * 200
    n = 200_000
    started = time.perf_counter()
    for i in range(n):
        producer.send(value, partition=i & 1)
    assert producer.flush() == n
    produced = time.perf_counter() - started
    started = time.perf_counter()
    read = sum(len(read_partition(client, topic, p)) for p in range(2))
    consumed = time.perf_counter() - started
    assert read == n
    print(
        f"\nPython client, 200-byte messages, batch 200, acks written: "
        f"produce {n / produced:,.0f} msg/s, consume {n / consumed:,.0f} msg/s"
    )


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_message_format_two_round_trips_times_headers_and_every_codec(client, compression):
    topic = f"f2-{compression}-{uuid.uuid4().hex[:6]}"
    created = client.create_topic(topic, 1, message_format=2)
    assert created.settings["message_format"] == 2
    producer = ringlog.Producer(client, topic, acks="flushed", batch_messages=100, compression=compression)
    sent = []
    for n in range(1000):
        value = f'{{"n":{n},"level":"info","msg":"served"}}'.encode()
        headers = (("n", str(n).encode()), ("flag", None))
        producer.send(value, key=f"k{n}".encode(), headers=headers, timestamp_ms=1_700_000_000_000 + n)
        sent.append((f"k{n}".encode(), value, 1_700_000_000_000 + n, headers))
    producer.close()
    consumer = ringlog.Consumer(client, topic, 0, "earliest")
    got = []
    while len(got) < len(sent):
        got.extend(consumer.poll())
    assert [(m.key, m.value, m.timestamp, m.headers) for m in got] == sent
    offsets = [m.offset for m in got]
    assert offsets == sorted(set(offsets))
    # A consumer placed inside a batch starts at that record.
    inside = ringlog.Consumer(client, topic, 0, offsets[250])
    assert inside.poll()[0].value == sent[250][1]
    # The CLI reads what Python wrote, times and headers included.
    out = subprocess.run(
        [CLI, "--brokers", BROKERS, "consume", topic, "--exit-at-end", "--print-timestamps", "--print-headers"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    lines = out.splitlines()
    assert len(lines) == 1000
    assert lines[7] == '1700000000007\tn=7,flag\t{"n":7,"level":"info","msg":"served"}'


def test_the_cli_produces_format_two_and_python_reads_it(client):
    topic = f"f2-cli-{uuid.uuid4().hex[:6]}"
    subprocess.run([CLI, "--brokers", BROKERS, "topic", "create", topic, "--message-format", "2"], check=True)
    lines = "".join(f"line {n}\n" for n in range(500)).encode()
    subprocess.run(
        [CLI, "--brokers", BROKERS, "produce", topic, "--compression", "zstd", "--header", "src=cli"],
        input=lines,
        check=True,
    )
    consumer = ringlog.Consumer(client, topic, 0, "earliest")
    got = []
    while len(got) < 500:
        got.extend(consumer.poll())
    assert [m.value for m in got] == [f"line {n}".encode() for n in range(500)]
    assert all(m.headers == (("src", b"cli"),) for m in got)
    assert all(m.timestamp > 1_700_000_000_000 for m in got)


def test_format_one_topics_refuse_times_headers_and_codecs(client):
    topic = f"f1-{uuid.uuid4().hex[:6]}"
    client.create_topic(topic, 1)
    with pytest.raises(ringlog.RinglogError, match="not compressed"):
        ringlog.Producer(client, topic, compression="gzip")
    producer = ringlog.Producer(client, topic)
    with pytest.raises(ringlog.RinglogError, match="no time or headers"):
        producer.send(b"x", headers=(("a", b"b"),))


def test_an_idempotent_producer_is_stored_once_when_it_resends_and_starts_afresh_after_a_gap(client):
    topic = fresh_topic(client, message_format=2)
    producer = ringlog.Producer(client, topic, acks="flushed", batch_messages=10)
    assert producer.producer_id is not None, "idempotent by default on format 2"
    pid, epoch = producer.producer_id
    assert epoch == 0
    assert ringlog.Producer(client, topic).producer_id[0] != pid, "each producer its own id"
    assert ringlog.Producer(client, topic, acks="none").producer_id is None
    for n in range(30):
        producer.send(b"%d" % n, partition=0)
    assert producer.flush() == 30
    # A batch sent twice (its answer lost, say) is stored once.
    numbers = producer._number(0, 1)
    assert numbers == (pid, 0, 30)
    again = ringlog.batch.encode_batch([(None, b"30", (), 1_700_000_000_000)], "none", numbers)
    for _ in range(2):
        producer._order += 1
        producer._write(0, again, 1, 0, producer._order)
    assert producer.flush() == 32, "both answered"
    # A gap (batches the broker never got): the producer starts the
    # partition afresh in epoch 1, and what follows goes on from there.
    producer._sequence[0] = 77
    for n in range(31, 40):
        producer.send(b"%d" % n, partition=0)
    assert producer.flush() == 41
    assert producer.failed == 0
    assert producer._epoch[0] == 1
    values = [int(m.value) for m in read_partition(client, topic, 0)]
    assert values == list(range(40)), values


def _break_connections(producer):
    """Cuts the producer's connections under its unanswered batches (the
    answers in their buffers are lost with them)."""
    import socket

    for conn in producer._conns.values():
        conn.sock.shutdown(socket.SHUT_RDWR)


def test_a_broken_connection_resends_numbered_batches_once_each(client):
    """Issue 46, item 8: an idempotent producer's batches whose answers a
    broken connection lost are sent again on a new one; the broker knows
    the ones it stored, so every message is stored exactly once, in order."""
    topic = fresh_topic(client, message_format=2)
    producer = ringlog.Producer(client, topic, acks="flushed", batch_messages=10, linger=60)
    assert producer.producer_id is not None
    for i in range(50):
        producer.send(f"m{i}".encode())
    _break_connections(producer)
    for i in range(50, 60):
        producer.send(f"m{i}".encode())
    assert producer.flush() == 60
    assert (producer.failed, producer.unknown) == (0, 0)
    assert producer.resent >= 1
    values = [m.value for m in read_partition(client, topic, 0)]
    assert values == [f"m{i}".encode() for i in range(60)]


def test_a_broken_connection_leaves_unnumbered_batches_unknown_and_says_so(client):
    """Batches that are not numbered are not sent again (they might be
    stored twice): their outcome is unknown, and flush says how many."""
    topic = fresh_topic(client)
    producer = ringlog.Producer(client, topic, acks="flushed", batch_messages=10, linger=60)
    assert producer.producer_id is None
    for i in range(50):
        producer.send(f"m{i}".encode())
    _break_connections(producer)
    with pytest.raises(ringlog.ConnectionFailed, match="50 messages' outcome unknown"):
        producer.flush()
    assert (producer.acked, producer.unknown) == (0, 50)
    # Whatever was stored was stored once.
    values = [m.value for m in read_partition(client, topic, 0)]
    assert len(values) == len(set(values)) <= 50
    # The producer goes on, on a new connection.
    producer.send(b"after")
    assert producer.flush() == 1
