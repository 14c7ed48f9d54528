#!/usr/bin/env bash
# Issue 9, item 5: one consumer of one partition, one fetch at a time
# (--prefetch 0, the paper's consumer) against fetching ahead on a thread
# of its own (--prefetch 2, 4, 8), with 1 MiB fetches and every CRC
# checked, beside the loopback sendfile ceiling measured in the same run.
# Release build, one broker with 2 shards, 10,000,000 × 200 B in one
# partition (read from the page cache); then smaller fetches. Writes
# run.log here.
#   bash loadgen/results/2026-12-01-vm/prefetch/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
here="$(dirname "$0")"
bin=target/release
data="$(mktemp -d /var/tmp/prefetch.XXXX)"
port=19971
exec > >(tee "$here/run.log") 2>&1
echo "== $(date -u) $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty); $(nproc) cores"
"$bin/broker" --data-dir "$data" --listen 127.0.0.1:$port >"$data.log" 2>&1 &
broker=$!
trap 'kill $broker; wait $broker 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
sleep 1
lg() { "$bin/loadgen" --brokers 127.0.0.1:$port "$@"; }
lg produce --topic one --partitions 1 --messages 10000000 --size 200 --batch 100 --acks written 2>&1 | tail -3
for round in 1 2 3; do
    echo "== round $round"
    lg loopback --bytes 2000000000 --rounds 3 2>&1 | tail -1
    for depth in 0 2 4 8; do
        echo "-- --prefetch $depth"
        /usr/bin/time -f "consumer: %e s wall, %U s user, %S s sys" \
            "$bin/loadgen" --brokers 127.0.0.1:$port consume --topic one \
            --messages 10000000 --fetch-bytes 1048576 --prefetch $depth 2>&1 |
            grep -E 'msg/s|MB/s|consumer:' | tail -3
    done
done
echo "== smaller fetches: msg/s and consumer user+sys seconds"
for round in 1 2; do
    for bytes in 1048576 262144 131072 65536; do
        for depth in 0 2 4; do
            /usr/bin/time -f "%U+%S s" "$bin/loadgen" --brokers 127.0.0.1:$port \
                consume --topic one --messages 10000000 --fetch-bytes $bytes \
                --prefetch $depth 2>&1 | grep -E 'records received|s$' | tail -2 |
                tr '\n' ' ' | sed "s/^/--fetch-bytes $bytes --prefetch $depth: /"
            echo
        done
    done
done
