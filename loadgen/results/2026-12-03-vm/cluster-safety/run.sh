#!/usr/bin/env bash
# Issue 23's first trial, as an operator would run it: one broker
# (`--etcd URL --broker-id 1`) with a topic of 2 partitions and 50,000
# messages acknowledged with acks=flushed; then etcd is stopped and a new,
# empty etcd started on the same URL. Prints the data directory's size and
# segment count before and after, the broker's log lines about it, what
# `ringlog brokers` and `ringlog topic create` say 20 s later, and (with a
# broker that has it) what one restart with --join-new-cluster brings back.
#
#   run.sh BIN_DIR [OUT_DIR]     BIN_DIR holds `broker` and `ringlog`
#
# Ports 23790/23800 (etcd) and 23910 (the broker) on 127.0.0.1; everything
# it starts is stopped by PID at the end.
set -euo pipefail
bin=${1:?usage: run.sh BIN_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
etcd_url=http://127.0.0.1:23790
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

start_etcd() { # data dir
    etcd --name t --data-dir "$1" --listen-client-urls $etcd_url --advertise-client-urls $etcd_url \
        --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
        --initial-cluster t=http://127.0.0.1:23800 >>"$out/etcd.log" 2>&1 &
    etcd_pid=$!
    pids+=("$etcd_pid")
    for _ in $(seq 100); do curl -sf $etcd_url/health >/dev/null 2>&1 && return; sleep 0.1; done
    echo "etcd did not start" >&2; exit 1
}
start_broker() { # extra args...
    RINGLOG_LOG=info "$bin/broker" --data-dir "$work/data" --listen 127.0.0.1:23910 --shards 2 \
        --broker-id 1 --etcd $etcd_url --cluster trial "$@" >>"$out/broker.stdout" 2>>"$out/broker.log" &
    broker_pid=$!
    pids+=("$broker_pid")
    for _ in $(seq 100); do grep -q ready "$out/broker.stdout" 2>/dev/null && return; sleep 0.1; done
    echo "broker did not start" >&2; cat "$out/broker.log" >&2; exit 1
}
stop_broker() { kill -TERM "$broker_pid"; wait "$broker_pid" 2>/dev/null || true; : >"$out/broker.stdout"; }
sizes() { # label
    local segments
    segments=$(find "$work/data" -path "$work/data/.orphaned" -prune -o -name '*.log' -print | wc -l)
    echo "$1: data dir $(du -sk "$work/data" | cut -f1) KB, $segments segment files (outside .orphaned/)" | tee -a "$out/summary.txt"
}
cli() { "$bin/ringlog" --brokers 127.0.0.1:23910 "$@"; }

: >"$out/summary.txt"
"$bin/broker" --version | tee -a "$out/summary.txt"
start_etcd "$work/etcd-1"
start_broker
cli topic create keep --partitions 2 >/dev/null
seq 1 50000 | sed 's/^/message-/' | cli produce keep --acks flushed
sizes "before the new etcd"

kill -9 "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true
start_etcd "$work/etcd-2"          # a new, empty etcd on the same URL
sleep 3
sizes "3 s after the new etcd"
echo "broker log lines since:" | tee -a "$out/summary.txt"
grep -E "deleted in the cluster|no longer holds|moved aside|lease|registering|not registering|applying nothing" "$out/broker.log" \
    | sed 's/^[^ ]* //' | cut -c1-300 | sort | uniq -c | tee -a "$out/summary.txt"
sleep 17
echo "20 s after: ringlog brokers ->" | tee -a "$out/summary.txt"
cli brokers 2>&1 | tee -a "$out/summary.txt" || true
echo "ringlog consume keep --exit-at-end | wc -l ->" | tee -a "$out/summary.txt"
{ cli consume keep --from earliest --exit-at-end 2>/dev/null || true; } | wc -l | tee -a "$out/summary.txt"
echo "ringlog topic create other ->" | tee -a "$out/summary.txt"
cli topic create other 2>&1 | tee -a "$out/summary.txt" || true

if "$bin/broker" --help | grep -q -- --join-new-cluster; then
    stop_broker
    start_broker --join-new-cluster
    sizes "after one restart with --join-new-cluster"
    echo "ringlog topic describe keep ->" | tee -a "$out/summary.txt"
    cli topic describe keep 2>&1 | tee -a "$out/summary.txt"
    echo "ringlog consume keep --exit-at-end | wc -l ->" | tee -a "$out/summary.txt"
    { cli consume keep --from earliest --exit-at-end 2>/dev/null || true; } | wc -l | tee -a "$out/summary.txt"
    echo "ringlog brokers ->" | tee -a "$out/summary.txt"
    cli brokers 2>&1 | tee -a "$out/summary.txt"
fi
echo "output in $out"
