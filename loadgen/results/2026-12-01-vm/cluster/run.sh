#!/usr/bin/env bash
# The cluster figures of issue 7: 3 brokers (1 shard each) vs 1 broker (2
# shards) on this 2-core machine, a consumer group of 3, and the failover
# times. Output: run.log beside this script.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
L=target/release/loadgen
export RINGLOG_CLUSTER_DIR=/tmp/ringlog-results-cluster ETCD_PORT=23790
rm -rf "$RINGLOG_CLUSTER_DIR"
echo "== 3 brokers, 1 shard each (deploy/cluster.sh start 3) =="
bash deploy/cluster.sh start 3
B=127.0.0.1:19010
for run in 1 2; do
    $L --brokers $B produce --topic c$run --partitions 6 --num-records 3000000 --record-size 200 --batch 50 --acks written 2>&1 | tail -2
    $L --brokers $B consume --topic c$run --messages 3000000 2>&1 | tail -1
done
echo "== a consumer group of 3 members over the same 6 partitions =="
$L --brokers $B consume --topic c1 --group results --consumers 3 --messages 3000000 2>&1 | tail -2
echo "== failover, 3 members, session timeout 3 s and 10 s =="
$L --brokers $B failover --members 3 --session-timeout-ms 3000 2>&1 | tail -2
$L --brokers $B failover --members 3 --session-timeout-ms 10000 2>&1 | tail -2
echo "== loadgen paper against the cluster (ringlog only) =="
$L --brokers $B paper --messages 1000000 --systems ringlog --out /tmp/ringlog-results-paper 2>&1 | sed -n '/^system/,/^\*/p'
bash deploy/cluster.sh stop
echo "== 1 broker, 2 shards (standalone) =="
rm -rf /tmp/ringlog-results-single
target/release/broker --data-dir /tmp/ringlog-results-single --listen 127.0.0.1:19100 --shards 2 >/tmp/ringlog-results-single.ready 2>/tmp/ringlog-results-single.log &
pid=$!
sleep 1
for run in 1 2; do
    $L --brokers 127.0.0.1:19100 produce --topic s$run --partitions 6 --num-records 3000000 --record-size 200 --batch 50 --acks written 2>&1 | tail -2
    $L --brokers 127.0.0.1:19100 consume --topic s$run --messages 3000000 2>&1 | tail -1
done
kill -TERM $pid; wait $pid || true
rm -rf /tmp/ringlog-results-single "$RINGLOG_CLUSTER_DIR"
