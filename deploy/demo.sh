#!/usr/bin/env bash
# The README's "main job": start a standalone broker on loopback with a fresh
# data directory, do a produce/consume round trip with the ringlog CLI, run
# the paper's producer and consumer workloads with loadgen (1M messages of
# 200 bytes), then stop the broker with SIGTERM. Needs nothing but the
# release binaries (built here if missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/release"
if [[ ! -x "$bin/broker" || ! -x "$bin/ringlog" || ! -x "$bin/loadgen" ]]; then
    (cd "$root" && cargo build --release --bins)
fi
work="$(mktemp -d)"
"$bin/broker" --data-dir "$work/data" --listen 127.0.0.1:0 --shards 2 >"$work/ready" 2>"$work/broker.log" &
pid=$!
cleanup() {
    kill -TERM "$pid" 2>/dev/null && wait "$pid" || true
    rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do
    grep -q ready "$work/ready" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/broker.log" >&2; exit 1; }
    sleep 0.1
done
cat "$work/ready"
# "ringlog broker 0 ready: shards 127.0.0.1:P0,127.0.0.1:P1 data-dir D"
export RINGLOG_BROKERS="$(sed -n 's/.*shards \([^ ]*\).*/\1/p' "$work/ready")"

set -x
"$bin/ringlog" topic create demo --partitions 4
printf 'hello\nfrom\nringlog\n' | "$bin/ringlog" produce demo --partition 0 --acks flushed
"$bin/ringlog" consume demo --partition 0 --from earliest --exit-at-end --print-offsets
"$bin/ringlog" topic describe demo
"$bin/loadgen" produce --topic paper-batch50 --messages 1000000 --size 200 --batch 50
"$bin/loadgen" produce --topic paper-batch1 --messages 1000000 --size 200 --batch 1
"$bin/loadgen" consume --topic paper-batch50 --messages 1000000 --fetch-bytes 204800
set +x
segments_bytes="$(du -cb "$work"/data/paper-batch50-*/*.log | tail -1 | cut -f1)"
echo "on disk: $segments_bytes bytes of segments for 1000000 messages of 200 bytes ($(( (segments_bytes - 200000000) / 1000000 )) bytes of framing per message)"
