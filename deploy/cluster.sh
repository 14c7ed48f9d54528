#!/usr/bin/env bash
# A ringlog cluster on loopback: one etcd and N brokers, everything (data,
# logs, pid files) under one folder, $RINGLOG_CLUSTER_DIR (default
# /tmp/ringlog-cluster). For trying the cluster out, demos and benchmarks
# on one machine; see deploy/README.md for real deployments.
#
#   deploy/cluster.sh start [N]    etcd on 127.0.0.1:2379 (if not already
#                                  running there) + brokers 1..N (default 3);
#                                  broker i's shard s listens on 19000+10*i+s
#   deploy/cluster.sh stop         SIGTERM the brokers, then etcd, by PID
#   deploy/cluster.sh status       which are running, and the live brokers
#
# Installs Debian's etcd-server if etcd is missing (needs root), and builds
# the release binaries if they are missing. Environment: SHARDS (per broker,
# default 1), ETCD_PORT (2379), BROKER_BASE_PORT (19000).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# Where cargo puts the binaries (CARGO_TARGET_DIR when set).
bin="${CARGO_TARGET_DIR:-$root/target}/release"
dir="${RINGLOG_CLUSTER_DIR:-/tmp/ringlog-cluster}"
etcd_port="${ETCD_PORT:-2379}"
base="${BROKER_BASE_PORT:-19000}"
shards="${SHARDS:-1}"
endpoint="http://127.0.0.1:$etcd_port"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
running() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

ensure_etcd() {
    if command -v etcd >/dev/null; then return; fi
    echo "cluster.sh: etcd is missing; installing Debian's etcd-server"
    bash "$root/deploy/test-deps.sh" >/dev/null
    command -v etcd >/dev/null || { echo "cluster.sh: etcd still missing" >&2; exit 1; }
}

ensure_binaries() {
    if [[ ! -x "$bin/broker" || ! -x "$bin/ringlog" ]]; then
        (cd "$root" && cargo build --release --bins)
    fi
}

start() {
    local n="${1:-3}"
    ensure_etcd
    ensure_binaries
    mkdir -p "$dir"
    if running "$dir/etcd.pid"; then
        echo "etcd: already running (pid $(cat "$dir/etcd.pid"))"
    elif port_open "$etcd_port"; then
        echo "etcd: something already listens on $endpoint; using it"
    else
        local peer=$((etcd_port + 1))
        etcd --name ringlog --data-dir "$dir/etcd" \
            --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
            --listen-peer-urls "http://127.0.0.1:$peer" \
            --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
            --initial-cluster "ringlog=http://127.0.0.1:$peer" \
            >"$dir/etcd.log" 2>&1 &
        echo $! >"$dir/etcd.pid"
        for _ in $(seq 100); do
            port_open "$etcd_port" && break
            sleep 0.1
        done
        port_open "$etcd_port" || { echo "cluster.sh: etcd did not start; see $dir/etcd.log" >&2; exit 1; }
        echo "etcd: $endpoint, data in $dir/etcd, pid $(cat "$dir/etcd.pid")"
    fi
    for i in $(seq 1 "$n"); do
        local pidfile="$dir/broker-$i.pid"
        if running "$pidfile"; then
            echo "broker $i: already running (pid $(cat "$pidfile"))"
            continue
        fi
        "$bin/broker" --data-dir "$dir/broker-$i" --listen "127.0.0.1:$((base + 10 * i))" \
            --shards "$shards" --broker-id "$i" --etcd "$endpoint" \
            --first-cpu "$(( (i - 1) * shards % $(nproc) ))" \
            >"$dir/broker-$i.ready" 2>"$dir/broker-$i.log" &
        echo $! >"$pidfile"
        for _ in $(seq 100); do
            grep -q ready "$dir/broker-$i.ready" 2>/dev/null && break
            kill -0 "$(cat "$pidfile")" 2>/dev/null || break
            sleep 0.1
        done
        if ! grep -q ready "$dir/broker-$i.ready" 2>/dev/null; then
            echo "cluster.sh: broker $i did not start; its log:" >&2
            tail -5 "$dir/broker-$i.log" >&2
            exit 1
        fi
        echo "broker $i: $(sed -n 's/.*shards \([^ ]*\).*/\1/p' "$dir/broker-$i.ready"), data in $dir/broker-$i, pid $(cat "$pidfile")"
    done
    echo "export RINGLOG_BROKERS=127.0.0.1:$((base + 10))"
}

stop() {
    local pidfile
    for pidfile in "$dir"/broker-*.pid; do
        [[ -f "$pidfile" ]] || continue
        if running "$pidfile"; then
            kill -TERM "$(cat "$pidfile")"
            for _ in $(seq 600); do running "$pidfile" || break; sleep 0.1; done
            echo "$(basename "$pidfile" .pid): stopped"
        fi
        rm -f "$pidfile"
    done
    if running "$dir/etcd.pid"; then
        kill -TERM "$(cat "$dir/etcd.pid")"
        for _ in $(seq 100); do running "$dir/etcd.pid" || break; sleep 0.1; done
        echo "etcd: stopped"
    fi
    rm -f "$dir/etcd.pid"
}

status() {
    local pidfile any=0
    if running "$dir/etcd.pid"; then echo "etcd: running (pid $(cat "$dir/etcd.pid")) on $endpoint"; else echo "etcd: not running"; fi
    for pidfile in "$dir"/broker-*.pid; do
        [[ -f "$pidfile" ]] || continue
        any=1
        if running "$pidfile"; then
            echo "$(basename "$pidfile" .pid): running (pid $(cat "$pidfile"))"
        else
            echo "$(basename "$pidfile" .pid): not running"
        fi
    done
    [[ $any -eq 1 ]] || echo "no brokers started from $dir"
    if [[ -x "$bin/ringlog" ]] && port_open "$((base + 10))"; then
        "$bin/ringlog" --brokers "127.0.0.1:$((base + 10))" brokers || true
    fi
}

case "${1:-}" in
    start) start "${2:-3}" ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: deploy/cluster.sh start [N] | stop | status" >&2; exit 2 ;;
esac
