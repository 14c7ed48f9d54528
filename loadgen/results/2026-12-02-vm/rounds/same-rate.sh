#!/usr/bin/env bash
# The same figure, measured again: twice, a fresh broker (two shards) and
# `loadgen sweep --rates 555000,555000,555000` (three identical 10 s runs
# at one rate, acks written, batch 10), then a fresh broker and one
# `loadgen e2e` at that rate. Prints each run's row.
#   bash loadgen/results/2026-12-02-vm/rounds/same-rate.sh [RATE]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin=target/release
port=19860
rate=${1:-555000}
fresh() {
    data=$(mktemp -d)
    "$bin/broker" --data-dir "$data" --listen 127.0.0.1:$port --shards 2 >"$data.log" 2>&1 &
    pid=$!
    until "$bin/ringlog" --brokers 127.0.0.1:$port topic list >/dev/null 2>&1; do sleep 0.05; done
}
stop() { kill $pid; wait $pid || true; rm -rf "$data" "$data.log"; }
for _ in 1 2; do
    fresh
    echo "sweep $rate x3:"
    "$bin/loadgen" --brokers 127.0.0.1:$port sweep --rates $rate,$rate,$rate --acks written --batch 10 2>&1 | grep "^written"
    stop
    fresh
    echo -n "e2e: "
    "$bin/loadgen" --brokers 127.0.0.1:$port e2e --topic e --rate $rate --batch 10 --acks written \
        --duration 10 --warmup 2 2>&1 | grep "publish latency"
    stop
done
