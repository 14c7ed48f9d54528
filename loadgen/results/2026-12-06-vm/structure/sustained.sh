#!/usr/bin/env bash
# A sustained produce past the page cache, before and after (issue 51's
# run): one standalone broker of 2 shards, 1 partition, 1,000 messages of
# 200 bytes per request, acks none, 60 s; the disk's own rates beside it.
#   BEFORE=/path/to/old/target/release AFTER=target/release bash sustained.sh
set -euo pipefail
before="${BEFORE:?}"; after="${AFTER:-target/release}"
dd_dir=$(mktemp -d /tmp/ringlog-dd-XXXX)
echo "disk O_DIRECT: $(dd if=/dev/zero of=$dd_dir/f bs=1M count=2000 oflag=direct 2>&1 | tail -1)"
echo "disk buffered+fdatasync: $(dd if=/dev/zero of=$dd_dir/f bs=1M count=2000 conv=fdatasync 2>&1 | tail -1)"
rm -rf "$dd_dir"
for side in before after; do
    bin="$before"; [ "$side" = after ] && bin="$after"
    dir=$(mktemp -d /tmp/ringlog-sustained-XXXX)
    "$bin/broker" --data-dir "$dir/data" --listen 127.0.0.1:39900 >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "ready" "$dir/log" 2>/dev/null && break; sleep 0.1; done
    echo "== $side ($("$bin/broker" --version))"
    "$bin/loadgen" --brokers 127.0.0.1:39900 produce --duration 60 --warmup 10 --batch 1000 2>&1 | tail -2
    kill $pid; wait $pid 2>/dev/null || true
    rm -rf "$dir"; sync
done
