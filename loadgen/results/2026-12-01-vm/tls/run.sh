#!/usr/bin/env bash
# Issue 8, item 21: TLS against plain TCP on the same machine, same broker
# build, same workload (2 shards, release build). Certificates are made
# here with openssl (a CA, the broker's for 127.0.0.1, a client's); the
# broker requires the client certificate. Writes run.log here.
#   bash loadgen/results/2026-12-01-vm/tls/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin=target/release
out="$(dirname "$0")/run.log"
work="$(mktemp -d)"
exec > >(tee "$out") 2>&1

certs="$work/certs"; mkdir -p "$certs"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=ringlog bench CA" -keyout "$certs/ca.key" -out "$certs/ca.pem" 2>/dev/null
leaf() {
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
        -keyout "$certs/$1.key" -out "$certs/$1.csr" 2>/dev/null
    printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\n' "$2" > "$certs/$1.ext"
    openssl x509 -req -in "$certs/$1.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca.key" \
        -CAcreateserial -days 2 -extfile "$certs/$1.ext" -out "$certs/$1.pem" 2>/dev/null
}
leaf broker "IP:127.0.0.1"
leaf client "DNS:client.test"

run() { # label port extra-broker-args...
    local label=$1 port=$2; shift 2
    local data="$work/$label" brokers=127.0.0.1:$port
    "$bin/broker" --data-dir "$data" --listen "$brokers" --shards 2 "$@" >>"$work/$label.log" 2>&1 &
    local pid=$!
    until "$bin/ringlog" --brokers "$brokers" topic list >/dev/null 2>&1; do sleep 0.05; done
    echo "== $label: produce 4,000,000 x 200 B (1 partition, batch 50, acks written)"
    "$bin/loadgen" --brokers "$brokers" produce --topic t --partitions 1 --batch 50 --acks written --messages 4000000 | tail -2
    for round in 1 2 3; do
        echo "-- $label: consume 4,000,000 (round $round, page cache warm)"
        "$bin/loadgen" --brokers "$brokers" consume --topic t --messages 4000000 | tail -1
    done
    curl -s "http://127.0.0.1:$((port + 10))/metrics" | grep -E '^ringlog_fetch_(zero_copy|copied)_bytes_total' || true
    kill "$pid"; wait "$pid" || true
}

echo "== $(date -u) $(git rev-parse --short HEAD); $(nproc) cores"
run plain 19700 --metrics-listen 127.0.0.1:19710
export RINGLOG_TLS_CA="$certs/ca.pem" RINGLOG_TLS_CERT="$certs/client.pem" RINGLOG_TLS_KEY="$certs/client.key"
run tls 19720 --metrics-listen 127.0.0.1:19730 \
    --tls-cert "$certs/broker.pem" --tls-key "$certs/broker.key" --tls-client-ca "$certs/ca.pem"
rm -rf "$work"
