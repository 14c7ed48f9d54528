#!/usr/bin/env bash
# 10,000 partitions against the open-files limit: one fresh broker (2 shards)
# with the given config lines, 1,000,000 x 200 B at batch 10 over the
# 10,000 partitions; prints msg/s, descriptors open after, files the shards
# closed early and the per-shard file limit from the start-up log.
#   bash tenk.sh ""  ;  bash tenk.sh "max_connections = 1000"
set -euo pipefail
bin=${BIN:-target/release}
port=19800
metrics=127.0.0.1:19993
data=$(mktemp -d)
echo "$1" >"$data.toml"
"$bin/broker" --config "$data.toml" --data-dir "$data" --listen 127.0.0.1:$port --shards 2 \
    --metrics-listen $metrics >"$data.log" 2>&1 &
pid=$!
until "$bin/ringlog" --brokers 127.0.0.1:$port topic list >/dev/null 2>&1; do sleep 0.05; done
"$bin/ringlog" --brokers 127.0.0.1:$port topic create many --partitions 10000 >/dev/null
rate=$("$bin/loadgen" --brokers 127.0.0.1:$port produce --topic many --partitions 10000 --batch 10 \
    --acks written --messages 1000000 | grep "records sent" | sed 's/.*sent, \([0-9.]*\) records.*/\1/')
sleep 1
echo "[$1] ${rate%.*} msg/s, fds $(ls /proc/$pid/fd | wc -l), closed early $(curl -s "$metrics/metrics" \
    | awk '/^ringlog_segment_files_evicted_total/ {s += $2} END {print s}'), $(grep -o 'per_shard=[0-9]*' "$data.log")"
kill $pid; wait $pid || true
rm -rf "$data" "$data.log" "$data.toml"
