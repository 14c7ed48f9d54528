#!/usr/bin/env bash
# Issue 9, item 6: the paper's three experiments at full size (10,000,000 ×
# 200 B) for all five systems in one `loadgen paper` run — ringlog, the
# paper's RabbitMQ and ActiveMQ, today's NATS JetStream and Redis Streams —
# on this 2-core VM, release build, all four peers started by
# deploy/peers.sh (as in the 2026-11-29 run). Writes run.log (with progress
# lines), cpu.log (the busiest processes every 60 s), paper.txt,
# paper.json and the charts here. Takes about 80 minutes.
#   bash loadgen/results/2026-12-01-vm/paper-10m-five/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
here="$(dirname "$0")"
export RINGLOG_PEERS_DIR="$(mktemp -d)"
exec > >(tee "$here/run.log") 2>&1
echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores"
bash deploy/peers.sh start
nats-server --version; redis-server --version
(
    while sleep 60; do
        echo "== $(date -u +%H:%M:%S)"
        top -b -n 1 -d 1 | sed -n '8,11p'
    done
) >"$here/cpu.log" 2>&1 &
sampler=$!
target/release/loadgen paper --messages 10000000 --out "$here"
kill "$sampler"
bash deploy/peers.sh stop
rm -rf "$RINGLOG_PEERS_DIR"
