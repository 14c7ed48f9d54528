#!/usr/bin/env bash
# Publish latency of fixed-rate e2e runs, builds alternating, a fresh broker
# (2 shards) each run: 200 B, batch 10, acks written, 8 s (2 s warm-up).
#   R=2 bash ab.sh 600000 OLD/target/release NEW/target/release
set -euo pipefail
rate=$1; shift
port=19900
for _ in $(seq 1 "${R:-2}"); do
    for bin in "$@"; do
        data=$(mktemp -d)
        "$bin/broker" --data-dir "$data" --listen 127.0.0.1:$port --shards 2 >"$data.log" 2>&1 &
        pid=$!
        until "$bin/ringlog" --brokers 127.0.0.1:$port topic list >/dev/null 2>&1; do sleep 0.05; done
        out=$("$bin/loadgen" --brokers 127.0.0.1:$port e2e --topic e1 --rate "$rate" --batch 10 \
            --acks written --duration 8 --warmup 2 2>&1 | grep publish)
        echo "$rate $bin ::${out#*:}"
        kill $pid; wait $pid || true
        rm -rf "$data" "$data.log"
    done
done
