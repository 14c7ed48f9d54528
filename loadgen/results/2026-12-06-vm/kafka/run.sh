#!/usr/bin/env bash
# Issue 41: Apache Kafka 4.4 beside ringlog on this machine, release build.
#   1. paper: the paper's three experiments at 10 M messages of 200 bytes,
#      ringlog (a standalone broker loadgen starts) and Kafka (one KRaft
#      node), plus Kafka's own default producer ("its best mode"); then
#      Kafka's experiments again through librdkafka;
#   2. sweep: Kafka (one node) at 10%, 50%, 90% of its maximum end-to-end
#      rate per ack mode, then ringlog (a standalone broker, two shards)
#      at the same absolute rates;
#   3. replication: ringlog's cluster (etcd and three brokers loadgen
#      starts), then Kafka's three KRaft nodes and NATS's three servers.
# Needs `deploy/peers.sh install kafka`, the Debian nats-server, and
# `cargo build --release --bins && cargo build --release -p ringlog-loadgen
# --features librdkafka` (the second build's loadgen has both clients). Writes
# run.log and each part's output under the directory given (default: here).
#   bash loadgen/results/2026-12-06-vm/kafka/run.sh [OUT_DIR] [PARTS]
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin=target/release
here="$(realpath "${1:-$(dirname "$0")}")"
parts="${2:-paper librdkafka sweep replication}"
export RINGLOG_PEERS_DIR="${RINGLOG_PEERS_DIR:-/tmp/ringlog-peers}"
exec > >(tee -a "$here/run.log") 2>&1
echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores; $(java -version 2>&1 | head -1)"
bash deploy/peers.sh stop >/dev/null
bash deploy/peers.sh stop kafka-cluster >/dev/null
bash deploy/peers.sh stop nats-cluster >/dev/null

if [[ " $parts " == *" paper "* ]]; then
    echo "== paper"
    bash deploy/peers.sh start kafka
    "$bin/loadgen" paper --messages 10000000 --systems ringlog,kafka --out "$here/paper"
    bash deploy/peers.sh stop kafka
fi

if [[ " $parts " == *" librdkafka "* ]]; then
    # The same experiments through librdkafka (a loadgen built with
    # `--features librdkafka`); the faster client is Kafka's figure.
    echo "== paper, librdkafka"
    bash deploy/peers.sh start kafka
    "$bin/loadgen" paper --messages 10000000 --systems kafka --kafka-client librdkafka --out "$here/paper-librdkafka"
    bash deploy/peers.sh stop kafka
fi

if [[ " $parts " == *" sweep "* ]]; then
    echo "== sweep"
    bash deploy/peers.sh start kafka
    for acks in written flushed; do
        "$bin/loadgen" --brokers 127.0.0.1:29092 sweep --system kafka --topic sweep \
            --acks "$acks" --rates 10%,50%,90% --duration 20 --warmup 5 --rounds 2 \
            --json "$here/sweep-kafka-$acks.json" --plot "$here/sweep-kafka-$acks"
    done
    bash deploy/peers.sh stop kafka
    data="$(mktemp -d)"
    brokers=127.0.0.1:19900
    "$bin/broker" --data-dir "$data" --listen "$brokers" --shards 2 >>"$data.log" 2>&1 &
    pid=$!
    until "$bin/ringlog" --brokers "$brokers" topic list >/dev/null 2>&1; do sleep 0.05; done
    for acks in written flushed; do
        # Kafka's targets (the slower system's), as absolute rates.
        rates="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(",".join(str(round(p["target_msgs_per_sec"])) for p in d["result"]["points"] if p["round"]==1))' "$here/sweep-kafka-$acks.json")"
        "$bin/loadgen" --brokers "$brokers" sweep --topic sweep \
            --acks "$acks" --rates "$rates" --duration 20 --warmup 5 --rounds 2 \
            --json "$here/sweep-ringlog-$acks.json" --plot "$here/sweep-ringlog-$acks"
    done
    kill "$pid"; wait "$pid" || true; rm -rf "$data" "$data.log"
fi

if [[ " $parts " == *" replication "* ]]; then
    echo "== replication"
    bash deploy/peers.sh start kafka-cluster
    bash deploy/peers.sh start nats-cluster
    # --latency-batch 1: ringlog's paced runs send each message when it is
    # due (pipelined), as Kafka's (linger 0) and NATS's do; its default
    # (the --batch of 100 with a 5 ms linger) puts 5 ms in every p50.
    "$bin/loadgen" replication --systems ringlog,kafka,nats --latency-batch 1 --out "$here/replication"
    bash deploy/peers.sh stop kafka-cluster
    bash deploy/peers.sh stop nats-cluster
fi
echo "== done $(date -u)"
