#!/bin/bash
# R=3 acks=all f1 / f2 / f2i, order rotated each round
cd /work/main
export RINGLOG_CLUSTER_DIR=/tmp/rl-exp ETCD_PORT=23790 BROKER_BASE_PORT=29000 SHARDS=2
timeout 60 bash deploy/cluster.sh start 3 >/dev/null 2>&1
B=./target/release; BR=127.0.0.1:29010
V=("f1:1" "f2:2 --no-idempotence" "f2i:2")
n=0
for r in $(seq 1 ${ROUNDS:-4}); do
for k in 0 1 2; do
  v=${V[$(( (k + r) % 3 ))]}
  n=$((n+1)); name=${v%%:*}; args=${v#*:}
  $B/ringlog --brokers $BR topic create w$n --partitions 3 --replication-factor 3 --message-format ${args%% *} >/dev/null 2>&1
  echo "$name r$r $(timeout 90 $B/loadgen produce --brokers $BR --topic w$n --partitions 3 --messages ${MSGS:-2000000} --batch ${BATCH:-50} --acks ${ACKS:-written} --message-format $args 2>&1 | grep -o '[0-9.]* records/sec.*50th' | sed 's/(.*avg latency,//')"
  $B/ringlog --brokers $BR topic delete w$n >/dev/null 2>&1; sync; sleep ${PAUSE:-0}
done; done
bash deploy/cluster.sh stop >/dev/null 2>&1
rm -rf /tmp/rl-exp
