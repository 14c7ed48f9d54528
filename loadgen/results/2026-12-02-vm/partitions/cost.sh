#!/usr/bin/env bash
# What a partition costs: one fresh broker (2 shards), one producer,
# 4,000,000 x 200 B at batch 50, acks written, to 1 partition and then to
# 1,000; prints msg/s, the broker's CPU (centiseconds), loadgen's user+sys
# CPU and the io_uring writes the broker made.
#   bash cost.sh [BIN_DIR]
set -euo pipefail
bin=${1:-target/release}
port=19850
metrics=127.0.0.1:19991
writes() { curl -s "$metrics/metrics" | awk '/^ringlog_disk_writes_total/ {s += $2} END {print s}'; }
data=$(mktemp -d)
"$bin/broker" --data-dir "$data" --listen 127.0.0.1:$port --shards 2 --metrics-listen $metrics >"$data.log" 2>&1 &
pid=$!
until "$bin/ringlog" --brokers 127.0.0.1:$port topic list >/dev/null 2>&1; do sleep 0.05; done
"$bin/ringlog" --brokers 127.0.0.1:$port topic create wide --partitions 1000 >/dev/null
for phase in "one 1" "wide 1000"; do
    set -- $phase
    c0=$(awk '{print $14+$15}' /proc/$pid/stat); w0=$(writes); t=$(mktemp)
    rate=$(/usr/bin/time -o "$t" -f "%U+%S" "$bin/loadgen" --brokers 127.0.0.1:$port produce --topic "$1" \
        --partitions "$2" --batch 50 --acks written --messages 4000000 | grep "records sent" | tail -1 \
        | sed 's/.*sent, \([0-9.]*\) records.*/\1/')
    sleep 0.5
    echo "$2 partition(s): ${rate%.*} msg/s, broker $(( $(awk '{print $14+$15}' /proc/$pid/stat) - c0 )) cs, loadgen $(cat "$t") s, writes $(( $(writes) - w0 ))"
    rm -f "$t"
done
kill $pid; wait $pid || true
rm -rf "$data" "$data.log"
