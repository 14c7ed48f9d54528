#!/usr/bin/env bash
# Issue 9, item 2: thousands of partitions and clients, on one broker with
# two shards (this VM has two cores), release build. Writes run.log here.
#   bash loadgen/results/2026-12-02-vm/partitions/run.sh [log name, default run.log]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin=target/release
out="$(dirname "$0")/${1:-run.log}"
data="$(mktemp -d)"
port=19800
brokers=127.0.0.1:$port
exec > >(tee "$out") 2>&1

start_broker() {
    "$bin/broker" --data-dir "$data" --listen "$brokers" --shards 2 >>"$data.log" 2>&1 &
    pid=$!
    local t0=$(date +%s.%N)
    until "$bin/ringlog" --brokers "$brokers" topic list >/dev/null 2>&1; do sleep 0.05; done
    echo "broker up in $(echo "$(date +%s.%N) - $t0" | bc) s"
}
stop_broker() { kill "$pid"; wait "$pid" || true; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$pid/stat"; }
idle() {
    local a=$(cpu_ticks); sleep 10; local b=$(cpu_ticks)
    echo "idle CPU over 10 s: $(echo "scale=1; ($b-$a)/10" | bc)% of a core; RSS $(awk '/VmRSS/{print $2}' /proc/$pid/status) KiB; fds $(ls /proc/$pid/fd | wc -l)"
}

echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores"
start_broker
echo "== baseline, no topics"; idle

echo "== one partition, 1 producer / 1 consumer (batch 50, acks written, 200 B)"
"$bin/loadgen" --brokers "$brokers" produce --topic one --partitions 1 --batch 50 --acks written --messages 4000000 | tail -2
"$bin/loadgen" --brokers "$brokers" consume --topic one --messages 4000000 | tail -1

echo "== one partition, 32 producers (the clients of the 1,000-partition run, on one partition)"
"$bin/loadgen" --brokers "$brokers" produce --topic one32 --partitions 1 --producers 32 --batch 50 --acks written --messages 4000000 | tail -2

echo "== 1,000 partitions, 32 producers / 32 consumers (batch 50, acks written, 200 B)"
"$bin/ringlog" --brokers "$brokers" topic create wide --partitions 1000 >/dev/null
"$bin/loadgen" --brokers "$brokers" produce --topic wide --partitions 1000 --producers 32 --batch 50 --acks written --messages 4000000 | tail -2
"$bin/loadgen" --brokers "$brokers" consume --topic wide --consumers 32 --messages 4000000 | tail -1

echo "-- broker threads' CPU so far (s): $(for t in /proc/$pid/task/*; do printf '%s=%s ' "$(cat $t/comm)" "$(awk '{printf "%.2f", ($14+$15)/100}' $t/stat)"; done)"

echo "== 10,000 partitions"
t0=$(date +%s.%N)
"$bin/ringlog" --brokers "$brokers" topic create many --partitions 10000
echo "create: $(echo "$(date +%s.%N) - $t0" | bc) s"
idle
"$bin/loadgen" --brokers "$brokers" produce --topic many --partitions 10000 --batch 10 --acks written --messages 1000000 | tail -2
idle
echo "-- kill -9 and restart (recovery of 10,000 partitions + the others)"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
start_broker
idle
t0=$(date +%s.%N)
"$bin/ringlog" --brokers "$brokers" topic delete many
echo "delete: $(echo "$(date +%s.%N) - $t0" | bc) s"
echo "-- 2,000 topics x 4 partitions, created one by one"
t0=$(date +%s.%N)
for i in $(seq 1 2000); do "$bin/ringlog" --brokers "$brokers" topic create "t$i" --partitions 4 >/dev/null; done
echo "2,000 creates: $(echo "$(date +%s.%N) - $t0" | bc) s (each a process start + request)"
idle
stop_broker
rm -rf "$data" "$data.log"
