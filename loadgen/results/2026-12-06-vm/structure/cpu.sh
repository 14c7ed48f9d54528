#!/usr/bin/env bash
# The broker's own CPU per message, before and after (less noisy than
# msg/s on two shared cores): a standalone broker of one shard, 5,000,000
# messages of 200 bytes produced (acks none, batches of 1 and of 50) and
# consumed (200 KiB fetches); the broker's user and system time from
# /proc/PID/stat around each phase (user time is the broker's own code;
# system time is mostly the page cache and writeback, and noisier), five
# interleaved rounds.
#   BEFORE=/path/to/old/target/release AFTER=target/release bash cpu.sh
set -euo pipefail
before="${BEFORE:?}"; after="${AFTER:-target/release}"
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14, $15}' "/proc/$1/stat"; }
for round in 1 2 3 4 5; do
  for side in before after; do
    bin="$before"; [ "$side" = after ] && bin="$after"
    dir=$(mktemp -d /tmp/ringlog-cpu-XXXX)
    "$bin/broker" --data-dir "$dir/data" --listen 127.0.0.1:39500 --shards 1 >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "ready" "$dir/log" 2>/dev/null && break; sleep 0.1; done
    line="$side round $round:"
    for phase in produce1 produce50 consume; do
      sync
      c0=$(cpu $pid)
      case $phase in
        produce1) "$bin/loadgen" --brokers 127.0.0.1:39500 produce --topic t1 --messages 5000000 --batch 1 >/dev/null ;;
        produce50) "$bin/loadgen" --brokers 127.0.0.1:39500 produce --topic t50 --messages 5000000 --batch 50 >/dev/null ;;
        consume) "$bin/loadgen" --brokers 127.0.0.1:39500 consume --topic t50 --messages 5000000 >/dev/null ;;
      esac
      c1=$(cpu $pid)
      line="$line $phase $(echo "$c0 $c1" | awk -v t=$tick '{printf "user %.3f sys %.3f", ($3-$1)/t*1e6/5000000, ($4-$2)/t*1e6/5000000}') µs/msg;"
    done
    echo "$line"
    kill $pid; wait $pid 2>/dev/null || true
    rm -rf "$dir"
  done
done
