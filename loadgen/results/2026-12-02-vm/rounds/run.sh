#!/usr/bin/env bash
# Issue 9, item 4, measured with rounds: one broker (two shards), release
# build; for batch 10 and batch 1, `loadgen sweep --rounds 3` measures each
# ack mode's maximum end-to-end rate, then runs 10%, 50% and 90% of it three
# times, interleaved, 10 s each (2 s warm-up), and reports each rate's
# medians. Writes run.log, sweep-batch*.json and batch*/sweep.svg here, or
# in the directory given.
#   bash loadgen/results/2026-12-02-vm/rounds/run.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin=target/release
here="$(realpath "${1:-$(dirname "$0")}")"
data="$(mktemp -d)"
brokers=127.0.0.1:19900
exec > >(tee "$here/run.log") 2>&1
# Another broker on the port would answer in this one's place.
if ss -ltn | grep -q " ${brokers} "; then echo "$brokers is taken"; exit 1; fi

"$bin/broker" --data-dir "$data" --listen "$brokers" --shards 2 >>"$data.log" 2>&1 &
pid=$!
trap 'kill $pid; wait $pid || true; rm -rf "$data" "$data.log"' EXIT
until "$bin/ringlog" --brokers "$brokers" topic list >/dev/null 2>&1; do
    kill -0 $pid 2>/dev/null || { echo "the broker did not start:"; cat "$data.log"; exit 1; }
    sleep 0.05
done
echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores"
for batch in 10 1; do
    echo "== batch $batch"
    "$bin/loadgen" --brokers "$brokers" sweep --topic "rounds-b$batch" --batch "$batch" \
        --rates 10%,50%,90% --acks written,flushed --rounds 3 --duration 10 --warmup 2 \
        --json "$here/sweep-batch$batch.json" --plot "$here/batch$batch"
done
