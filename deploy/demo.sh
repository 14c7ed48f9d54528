#!/usr/bin/env bash
# The README's "main job": start a standalone broker on loopback with a fresh
# data directory, do a produce/consume round trip with the ringlog CLI, run
# the paper's experiments with `loadgen paper` (1 M messages of 200 bytes;
# RabbitMQ, ActiveMQ, NATS and Redis too when deploy/peers.sh started them,
# otherwise marked "not run"), then stop the broker with SIGTERM. Needs nothing but
# the release binaries (built here if missing). The table, JSON and charts
# land in ./loadgen-paper/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# Where cargo puts the binaries (CARGO_TARGET_DIR when set).
bin="${CARGO_TARGET_DIR:-$root/target}/release"
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
"$bin/loadgen" --brokers "$RINGLOG_BROKERS" paper --messages "${MESSAGES:-1000000}" --out loadgen-paper
set +x
echo "charts: $(pwd)/loadgen-paper/paper.svg and throughput-*.svg"
