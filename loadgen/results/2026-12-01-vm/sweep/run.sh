#!/usr/bin/env bash
# Issue 9, item 4: latency under load. One broker with two shards (this VM
# has two cores), release build; `loadgen sweep` measures each ack mode's
# maximum end-to-end rate, then runs at 10%, 50% and 90% of it, 10 s each
# (2 s warm-up). Writes run.log, sweep-batch*.json and batch*/sweep.svg
# here, or in the directory given.
#   bash loadgen/results/2026-12-01-vm/sweep/run.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin=target/release
here="${1:-$(dirname "$0")}"
data="$(mktemp -d)"
brokers=127.0.0.1:19900
exec > >(tee "$here/run.log") 2>&1

"$bin/broker" --data-dir "$data" --listen "$brokers" --shards 2 >>"$data.log" 2>&1 &
pid=$!
trap 'kill $pid; wait $pid || true; rm -rf "$data" "$data.log"' EXIT
until "$bin/ringlog" --brokers "$brokers" topic list >/dev/null 2>&1; do sleep 0.05; done
echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores"
for batch in 1 10; do
    echo "== batch $batch"
    "$bin/loadgen" --brokers "$brokers" sweep --topic "sweep-b$batch" --batch "$batch" \
        --rates 10%,50%,90% --acks written,flushed --duration 10 --warmup 2 \
        --json "$here/sweep-batch$batch.json" --plot "$here/batch$batch"
done
