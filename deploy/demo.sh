#!/usr/bin/env bash
# The README's "main job": start a standalone broker on loopback with a fresh
# data directory, do a produce/consume round trip with the ringlog CLI, run
# the paper's experiments with `loadgen paper` (1 M messages of 200 bytes)
# beside the paper's competitors and today's peers — RabbitMQ, ActiveMQ,
# NATS, Redis and Kafka, each started here with deploy/peers.sh when it is
# installed (deploy/test-deps.sh or deploy/peers.sh install put the first
# four there, deploy/peers.sh install kafka the last)
# and stopped again at the end; one that is missing is marked "not run" and
# a line says how to install it — then stop the broker with SIGTERM. Needs
# nothing but the release binaries (built here if missing). The table, JSON
# and charts land in ./loadgen-paper/. PEERS=0 runs ringlog's column alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# Where cargo puts the binaries (CARGO_TARGET_DIR when set).
bin="${CARGO_TARGET_DIR:-$root/target}/release"
if [[ ! -x "$bin/broker" || ! -x "$bin/ringlog" || ! -x "$bin/loadgen" ]]; then
    (cd "$root" && cargo build --release --bins)
fi
work="$(mktemp -d)"
pid=
started=()
cleanup() {
    if [[ -n "$pid" ]]; then kill -TERM "$pid" 2>/dev/null && wait "$pid" || true; fi
    # Only the peers this script started: one that was running before is
    # someone else's.
    for system in "${started[@]}"; do
        "$root/deploy/peers.sh" stop "$system" || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# The peers: each installed one that is not running yet is started.
installed() {
    case "$1" in
        rabbitmq) [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] ;;
        activemq) [[ -f /usr/share/activemq/bin/activemq.jar ]] ;;
        nats) command -v nats-server >/dev/null ;;
        redis) command -v redis-server >/dev/null ;;
        kafka) [[ -f "${RINGLOG_KAFKA_HOME:-${RINGLOG_PEERS_DIR:-/tmp/ringlog-peers}/kafka-4.4.0}/libs/kafka_2.13-4.4.0.jar" ]] ;;
    esac
}
port_of() {
    case "$1" in rabbitmq) echo 5672 ;; activemq) echo 61613 ;; nats) echo 4222 ;; redis) echo 6379 ;; kafka) echo 29092 ;; esac
}
missing=()
if [[ "${PEERS:-1}" != 0 ]]; then
    for system in rabbitmq activemq nats redis kafka; do
        if ! installed "$system"; then
            missing+=("$system")
        elif (exec 3<>"/dev/tcp/127.0.0.1/$(port_of "$system")") 2>/dev/null; then
            echo "demo: $system is running already: measured as it is, left running"
        elif "$root/deploy/peers.sh" start "$system"; then
            started+=("$system")
        else
            echo "demo: $system did not start (see above): its column says \"not run\""
        fi
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        echo "demo: not installed: ${missing[*]}: their columns say \"not run\"; install them with \`bash deploy/peers.sh install\` (root, Debian packages) and \`bash deploy/peers.sh install kafka\` (Maven), and run this again for the paper's whole comparison"
    fi
fi

"$bin/broker" --data-dir "$work/data" --listen 127.0.0.1:0 --shards 2 >"$work/ready" 2>"$work/broker.log" &
pid=$!
for _ in $(seq 100); do
    grep -q ready "$work/ready" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/broker.log" >&2; exit 1; }
    sleep 0.1
done
cat "$work/ready"
# "ringlog broker 0 ready: shards 127.0.0.1:P0,127.0.0.1:P1 data-dir D"
export RINGLOG_BROKERS="$(sed -n 's/.*shards \([^ ]*\).*/\1/p' "$work/ready")"

set -x
"$bin/ringlog" topic create demo --partitions 4
printf 'hello\nfrom\nringlog\n' | "$bin/ringlog" produce demo --partition 0 --acks flushed
"$bin/ringlog" consume demo --partition 0 --from earliest --exit-at-end --print-offsets
"$bin/ringlog" topic describe demo
"$bin/loadgen" --brokers "$RINGLOG_BROKERS" paper --messages "${MESSAGES:-1000000}" --out loadgen-paper
set +x
echo "charts: $(pwd)/loadgen-paper/paper.svg and throughput-*.svg"
