#!/usr/bin/env bash
# Issue 9, item 1: a consumer catching up from disk next to a tailing
# producer/consumer pair on the same shard. Release build, one broker with
# two shards, data on the VM's disk (ext4 on /dev/vda). Needs root (drops
# the page cache). Writes run.log here.
#   bash loadgen/results/2026-12-01-vm/cold/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin="${RINGLOG_BIN:-target/release}"  # RINGLOG_BIN=DIR runs another build
here="$(dirname "$0")"
data="$(mktemp -d /var/tmp/ringlog-cold.XXXX)"
brokers=127.0.0.1:19950
exec > >(tee "$here/${RINGLOG_LOG:-run.log}") 2>&1

"$bin/broker" --data-dir "$data" --listen "$brokers" --shards 2 \
    --metrics-listen 127.0.0.1:19959 >>"$data.log" 2>&1 &
pid=$!
trap 'kill $pid; wait $pid || true; rm -rf "$data" "$data.log" "$data.tail"' EXIT
until "$bin/ringlog" --brokers "$brokers" topic list >/dev/null 2>&1; do sleep 0.05; done
echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores; kernel $(uname -r)"
rl() { "$bin/ringlog" --brokers "$brokers" "$@"; }
shard_of() { rl topic describe "$1" | awk -v p="$2" '$1==p {print $3}'; }
rl topic create backlog --partitions 1 >/dev/null
want=$(shard_of backlog 0)
for i in $(seq 1 20); do
    rl topic create "tail$i" --partitions 1 >/dev/null
    if [[ "$(shard_of "tail$i" 0)" == "$want" ]]; then tail="tail$i"; break; fi
done
echo "backlog-0 and $tail-0 on shard $want"

echo "== writing the backlog: 25,000,000 × 200 B"
"$bin/loadgen" --brokers "$brokers" produce --topic backlog --messages 25000000 --size 200 \
    --batch 50 --acks written 2>&1 | grep -v "records/sec (" || true
sleep 2
du -sh "$data"
segment=$(ls -S "$data"/backlog-0/*.log | head -1)
sync; echo 3 > /proc/sys/vm/drop_caches
echo "== the disk: direct sequential read of one segment ($(du -h "$segment" | cut -f1))"
dd if="$segment" of=/dev/null bs=1M iflag=direct 2>&1 | tail -1

e2e() {
    "$bin/loadgen" --brokers "$brokers" e2e --topic "$tail" --rate 20000 --batch 1 \
        --acks written --duration "$1" --warmup 2 2>&1 | grep -E "^[0-9]+ records received|publish latency|^e2e:" | tail -3
}
echo "== baseline: the tail alone (20,000 msg/s, batch 1, acks written, 20 s)"
e2e 20
sync; echo 3 > /proc/sys/vm/drop_caches
echo "== the tail while a consumer reads the 4.9 GB backlog from disk"
e2e 30 > "$data.tail" &
tail_pid=$!
sleep 3
"$bin/loadgen" --brokers "$brokers" consume --topic backlog --messages 25000000 --fetch-bytes 1048576 2>&1 \
    | grep -E "^25000000 records received" || true
wait "$tail_pid"
cat "$data.tail"
echo "== fetch bytes by path (all shards)"
curl -s http://127.0.0.1:19959/metrics | grep -E "^ringlog_fetch_(zero_copy|cold|copied)_bytes_total" \
    | awk '{split($1,a,"{"); s[a[1]]+=$2} END {for (k in s) printf "%s %.0f\n", k, s[k]}'

