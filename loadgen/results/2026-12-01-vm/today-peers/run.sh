#!/usr/bin/env bash
# Issue 9, item 6: the paper's experiments at full size (10,000,000 × 200 B)
# for ringlog and today's peers, NATS JetStream and Redis Streams, on this
# 2-core VM, release build. Writes run.log, paper.txt, paper.json and the
# charts here.
#   bash loadgen/results/2026-12-01-vm/today-peers/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
here="$(dirname "$0")"
export RINGLOG_PEERS_DIR="$(mktemp -d)"
exec > >(tee "$here/run.log") 2>&1
echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores"
bash deploy/peers.sh start nats
bash deploy/peers.sh start redis
nats-server --version; redis-server --version
target/release/loadgen paper --messages 10000000 --systems ringlog,nats,redis --out "$here"
bash deploy/peers.sh stop
rm -rf "$RINGLOG_PEERS_DIR"
