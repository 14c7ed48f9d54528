#!/usr/bin/env bash
# Issue 42, item 7: the paper's ringlog figures and `loadgen replication`,
# before (4371fa9, the broker of 7acb7b3) and after (this commit's release
# build) the structure work, interleaved in one run on this machine.
#   BEFORE=/path/to/old/target/release AFTER=target/release bash run.sh
set -euo pipefail
out="$(cd "$(dirname "$0")" && pwd)"
before="${BEFORE:?the release binaries of the commit before}"
after="${AFTER:-target/release}"
for round in 1 2 3; do
    for side in before after; do
        bin="$before"; [ "$side" = after ] && bin="$after"
        echo "== paper round $round $side ($bin)"
        "$bin/loadgen" paper --systems ringlog --messages 10000000 \
            --out "$out/paper-$side-$round" | grep -E "^\| ringlog|msg/s|bytes"
    done
done
for side in before after; do
    bin="$before"; [ "$side" = after ] && bin="$after"
    echo "== replication $side ($bin)"
    "$bin/loadgen" replication --out "$out/replication-$side"
done
