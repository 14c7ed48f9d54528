#!/usr/bin/env bash
# Tail latency of one consumer reading 8 partitions of one shard at a low
# rate (most partitions idle at any moment): the case where a long-poll at
# the head of a connection's answers held back another partition's message.
#
#   bash run.sh OLD_BINDIR NEW_BINDIR     (each holds broker and loadgen)
#
# Runs old, new, old, new; both use the new loadgen's e2e consumer (one
# TopicConsumer) unless the directories say otherwise.
set -euo pipefail
for bin in "$1" "$2" "$1" "$2"; do
    dir=$(mktemp -d)
    "$bin/broker" --data-dir "$dir" --listen 127.0.0.1:19300 --shards 1 >"$dir.log" 2>&1 &
    pid=$!
    sleep 1
    echo "== $bin"
    "$bin/loadgen" e2e --brokers 127.0.0.1:19300 --topic idle --partitions 8 \
        --producers 1 --consumers 1 --rate 200 --batch 1 --acks written \
        --duration 12 --warmup 2 | tail -3 | head -2
    kill "$pid"
    wait "$pid" || true
    rm -rf "$dir" "$dir.log"
done
