#!/usr/bin/env bash
# Issue 42, item 7: the paper's ringlog figures and `loadgen replication`,
# before (the release binaries of 4371fa9, whose broker is 7acb7b3's) and
# after the structure work, interleaved in one run on this machine.
#   BEFORE=/path/to/old/target/release AFTER=target/release \
#   OUT=loadgen/results/2026-12-06-vm/structure/final \
#   PAPER_ROUNDS=3 REPLICATION_ROUNDS=2 bash run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here}"
before="${BEFORE:?the release binaries of the commit before}"
after="${AFTER:-target/release}"
mkdir -p "$out"
for round in $(seq 1 "${PAPER_ROUNDS:-3}"); do
    for side in before after; do
        bin="$before"; [ "$side" = after ] && bin="$after"
        echo "== paper round $round $side ($("$bin/broker" --version))"
        "$bin/loadgen" paper --systems ringlog --messages 10000000 \
            --out "$out/paper-$side-$round" >/dev/null
        grep -E "^ringlog " "$out/paper-$side-$round/paper.txt"
    done
done
for round in $(seq 1 "${REPLICATION_ROUNDS:-1}"); do
    for side in before after; do
        bin="$before"; [ "$side" = after ] && bin="$after"
        echo "== replication round $round $side ($("$bin/broker" --version))"
        "$bin/loadgen" replication --out "$out/replication-$side-$round" >/dev/null
        head -12 "$out/replication-$side-$round/replication.md"
    done
done
