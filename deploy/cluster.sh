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
#
# SECURE=1 deploy/cluster.sh start [N]: the same with security on. A CA and
# certificates are made with openssl under $RINGLOG_CLUSTER_DIR/certs; etcd
# serves TLS only and asks for client certificates; the brokers reach it
# with theirs, take SCRAM-SHA-256 logins, check every request against the
# access control rules, and log in to each other as the super user
# `admin`, whose password (random) is in $RINGLOG_CLUSTER_DIR/admin.pw and
# is written into etcd before any broker starts.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# Where cargo puts the binaries (CARGO_TARGET_DIR when set).
bin="${CARGO_TARGET_DIR:-$root/target}/release"
dir="${RINGLOG_CLUSTER_DIR:-/tmp/ringlog-cluster}"
etcd_port="${ETCD_PORT:-2379}"
base="${BROKER_BASE_PORT:-19000}"
shards="${SHARDS:-1}"
secure="${SECURE:-0}"
if [[ "$secure" == 1 ]]; then scheme=https; else scheme=http; fi
endpoint="$scheme://127.0.0.1:$etcd_port"
certs="$dir/certs"

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

# A CA, etcd's server certificate (127.0.0.1) and a client certificate
# for the brokers and the CLI's bootstrap (CN broker), all under $certs.
make_certificates() {
    [[ -f "$certs/ca.pem" ]] && return
    command -v openssl >/dev/null || { echo "cluster.sh: SECURE=1 makes certificates with openssl, which is missing (apt-get install openssl)" >&2; exit 1; }
    mkdir -p "$certs"
    (
        cd "$certs"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
            -keyout ca.key -out ca.pem -subj "/CN=ringlog cluster CA" 2>/dev/null
        for name in etcd broker; do
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                -keyout "$name.key" -out "$name.csr" -subj "/CN=$name" 2>/dev/null
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$name.ext"
            openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
                -extfile "$name.ext" -out "$name.pem" 2>/dev/null
            rm -f "$name.csr" "$name.ext"
        done
        chmod 600 ./*.key
    )
    echo "certificates: CA, etcd and broker in $certs"
}

# The secured brokers' shared settings, and the admin user in etcd.
secure_setup() {
    if [[ ! -f "$dir/admin.pw" ]]; then
        (umask 077; head -c 18 /dev/urandom | base64 >"$dir/admin.pw")
    fi
    cat >"$dir/secure.toml" <<TOML
# Written by deploy/cluster.sh (SECURE=1): see deploy/README.md, "Turning security on".
authentication = "scram"
authorization = true
super_users = ["User:admin"]
broker_user = "admin"
broker_password_file = "$dir/admin.pw"
etcd_ca = "$certs/ca.pem"
etcd_cert = "$certs/broker.pem"
etcd_key = "$certs/broker.key"
TOML
    "$bin/ringlog" users add admin --password-file "$dir/admin.pw" --etcd "$endpoint" \
        --etcd-ca "$certs/ca.pem" --etcd-cert "$certs/broker.pem" --etcd-key "$certs/broker.key" >/dev/null
    echo "users: admin (a super user; its password is in $dir/admin.pw)"
}

start() {
    local n="${1:-3}"
    ensure_etcd
    ensure_binaries
    mkdir -p "$dir"
    local etcd_tls=()
    if [[ "$secure" == 1 ]]; then
        make_certificates
        etcd_tls=(--cert-file "$certs/etcd.pem" --key-file "$certs/etcd.key"
            --trusted-ca-file "$certs/ca.pem" --client-cert-auth)
    fi
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
            "${etcd_tls[@]}" >"$dir/etcd.log" 2>&1 &
        echo $! >"$dir/etcd.pid"
        for _ in $(seq 100); do
            port_open "$etcd_port" && break
            sleep 0.1
        done
        port_open "$etcd_port" || { echo "cluster.sh: etcd did not start; see $dir/etcd.log" >&2; exit 1; }
        echo "etcd: $endpoint, data in $dir/etcd, pid $(cat "$dir/etcd.pid")"
    fi
    local secure_args=()
    if [[ "$secure" == 1 ]]; then
        secure_setup
        secure_args=(--config "$dir/secure.toml")
    fi
    for i in $(seq 1 "$n"); do
        local pidfile="$dir/broker-$i.pid"
        if running "$pidfile"; then
            echo "broker $i: already running (pid $(cat "$pidfile"))"
            continue
        fi
        "$bin/broker" --data-dir "$dir/broker-$i" --listen "127.0.0.1:$((base + 10 * i))" \
            --shards "$shards" --broker-id "$i" --etcd "$endpoint" \
            --first-cpu "$(( (i - 1) * shards % $(nproc) ))" "${secure_args[@]}" \
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
    if [[ "$secure" == 1 ]]; then
        echo "export RINGLOG_USER=admin RINGLOG_PASSWORD_FILE=$dir/admin.pw"
    fi
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
        if [[ "$secure" == 1 ]]; then
            RINGLOG_USER=admin RINGLOG_PASSWORD_FILE="$dir/admin.pw" \
                "$bin/ringlog" --brokers "127.0.0.1:$((base + 10))" brokers || true
        else
            "$bin/ringlog" --brokers "127.0.0.1:$((base + 10))" brokers || true
        fi
    fi
}

case "${1:-}" in
    start) start "${2:-3}" ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: deploy/cluster.sh start [N] | stop | status" >&2; exit 2 ;;
esac
