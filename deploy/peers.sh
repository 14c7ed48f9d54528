#!/usr/bin/env bash
# The paper's competitors and today's peers, on loopback, for `loadgen paper`:
#   RabbitMQ 3.10 (Debian rabbitmq-server): AMQP 0-9-1 on 127.0.0.1:5672
#   ActiveMQ 5.17 (Debian activemq):        STOMP on 127.0.0.1:61613
#   NATS 2.9 (Debian nats-server):          JetStream, file storage, on 127.0.0.1:4222
#   Redis 7.0 (Debian redis-server):        Streams, AOF fsync everysec, on 127.0.0.1:6379
# Each starts with a fresh data directory under $RINGLOG_PEERS_DIR (default
# /tmp/ringlog-peers) and persistent storage flushed asynchronously, as in
# the paper (RabbitMQ's message store fsyncs in the background; ActiveMQ's
# KahaDB runs with enableJournalDiskSyncs="false").
#
# NATS flushes JetStream files on its own interval (sync_interval, 2 min
# by default) and Redis fsyncs its append-only file every second: both
# asynchronous, like the others here.
#
#   deploy/peers.sh install            apt-get install all four (needs root)
#   deploy/peers.sh start [SYSTEM]     start all (NATS and Redis if installed), or rabbitmq / activemq / nats / redis
#   deploy/peers.sh stop [SYSTEM]      stop and delete their data
#   deploy/peers.sh status             which are reachable
set -euo pipefail

dir="${RINGLOG_PEERS_DIR:-/tmp/ringlog-peers}"
rabbit_bin=/usr/lib/rabbitmq/bin
what="${2:-all}"

want() { [[ "$what" == all || "$what" == "$1" ]]; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
    local port=$1 name=$2 log=$3
    for _ in $(seq 240); do
        port_open "$port" && return 0
        sleep 0.5
    done
    echo "peers.sh: $name did not open port $port within 120 s; its log: $log" >&2
    tail -20 "$log" >&2 || true
    return 1
}

# Stops the server whose pid file is $dir/NAME/NAME.pid (SIGTERM, then
# SIGKILL after 30 s) and deletes its data.
stop_by_pid() {
    local name=$1 base="$dir/$1"
    [[ -f "$base/$name.pid" ]] || return 0
    local pid
    pid="$(cat "$base/$name.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    rm -rf "$base"
    echo "$name: stopped"
}

install() {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q rabbitmq-server activemq nats-server redis-server
}

start_nats() {
    if ! command -v nats-server >/dev/null; then
        # `start` without a system starts what is installed; naming it
        # asks for it.
        if [[ "$what" == all ]]; then echo "nats: not installed, skipped (deploy/peers.sh install)"; return 0; fi
        echo "peers.sh: NATS is not installed: run deploy/peers.sh install" >&2
        return 1
    fi
    if port_open 4222; then echo "nats: already listening on 127.0.0.1:4222"; return 0; fi
    local base="$dir/nats"
    rm -rf "$base"
    mkdir -p "$base/jetstream"
    printf 'listen: 127.0.0.1:4222\njetstream {\n  store_dir: "%s"\n  max_memory_store: 1GB\n  max_file_store: 40GB\n}\n' \
        "$base/jetstream" >"$base/nats.conf"
    # Output to a file: a caller reading this script's output waits for
    # every writer of the pipe to close it.
    nats-server -c "$base/nats.conf" -l "$base/nats.log" >"$base/stdout.log" 2>&1 &
    echo $! >"$base/nats.pid"
    wait_port 4222 NATS "$base/nats.log"
    echo "nats: listening on 127.0.0.1:4222 (JetStream), data in $base/jetstream"
}

stop_nats() {
    stop_by_pid "nats"
}

start_redis() {
    if ! command -v redis-server >/dev/null; then
        # `start` without a system starts what is installed; naming it
        # asks for it.
        if [[ "$what" == all ]]; then echo "redis: not installed, skipped (deploy/peers.sh install)"; return 0; fi
        echo "peers.sh: Redis is not installed: run deploy/peers.sh install" >&2
        return 1
    fi
    if port_open 6379; then echo "redis: already listening on 127.0.0.1:6379"; return 0; fi
    local base="$dir/redis"
    rm -rf "$base"
    mkdir -p "$base"
    # Persistence as a log would have it: the append-only file, fsynced
    # every second; no RDB snapshots (they would copy the whole dataset).
    redis-server --bind 127.0.0.1 --port 6379 --dir "$base" \
        --appendonly yes --appendfsync everysec --save "" \
        --logfile "$base/redis.log" --daemonize no >"$base/stdout.log" 2>&1 &
    echo $! >"$base/redis.pid"
    wait_port 6379 Redis "$base/redis.log"
    echo "redis: listening on 127.0.0.1:6379 (AOF everysec), data in $base"
}

stop_redis() {
    stop_by_pid "redis"
}

rabbit_env() {
    export HOME="$dir/rabbitmq/home"
    export RABBITMQ_MNESIA_BASE="$dir/rabbitmq/mnesia"
    export RABBITMQ_LOG_BASE="$dir/rabbitmq/log"
    export RABBITMQ_NODENAME=ringlog-peer@localhost
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT=5672
    export RABBITMQ_DIST_PORT=25672
    export RABBITMQ_PID_FILE="$dir/rabbitmq/rabbitmq.pid"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/rabbitmq/enabled_plugins"
    export RABBITMQ_CONFIG_FILE="$dir/rabbitmq/rabbitmq"
    export ERL_EPMD_ADDRESS=127.0.0.1
}

start_rabbitmq() {
    [[ -x "$rabbit_bin/rabbitmq-server" ]] || { echo "peers.sh: RabbitMQ is not installed: run deploy/peers.sh install" >&2; return 1; }
    if port_open 5672; then echo "rabbitmq: already listening on 127.0.0.1:5672"; return 0; fi
    rm -rf "$dir/rabbitmq"
    mkdir -p "$dir/rabbitmq/home" "$dir/rabbitmq/mnesia" "$dir/rabbitmq/log"
    echo "[]." >"$dir/rabbitmq/enabled_plugins"
    # Loopback only; the guest user may connect from loopback by default.
    # A generous memory watermark so 10 M queued messages page to disk
    # instead of blocking publishers for long.
    cat >"$dir/rabbitmq/rabbitmq.conf" <<'EOF'
listeners.tcp.default = 127.0.0.1:5672
vm_memory_high_watermark.relative = 0.5
disk_free_limit.absolute = 1GB
EOF
    rabbit_env
    "$rabbit_bin/rabbitmq-server" >"$dir/rabbitmq/log/stdout.log" 2>&1 &
    wait_port 5672 RabbitMQ "$dir/rabbitmq/log/stdout.log"
    echo "rabbitmq: listening on 127.0.0.1:5672, data in $dir/rabbitmq/mnesia"
}

stop_rabbitmq() {
    if [[ -d "$dir/rabbitmq" ]]; then
        (rabbit_env; "$rabbit_bin/rabbitmqctl" -n ringlog-peer@localhost stop "$RABBITMQ_PID_FILE" >/dev/null 2>&1) || true
        # The Erlang VM started a name daemon (epmd); stop it too unless
        # another Erlang node still uses it.
        if epmd -names 2>/dev/null | grep -q '^name '; then :; else epmd -kill >/dev/null 2>&1 || true; fi
        rm -rf "$dir/rabbitmq"
        echo "rabbitmq: stopped"
    fi
}

activemq_jar=/usr/share/activemq/bin/activemq.jar

start_activemq() {
    [[ -f "$activemq_jar" ]] || { echo "peers.sh: ActiveMQ is not installed: run deploy/peers.sh install" >&2; return 1; }
    if port_open 61613; then echo "activemq: already listening on 127.0.0.1:61613"; return 0; fi
    local base="$dir/activemq"
    rm -rf "$base"
    mkdir -p "$base/conf" "$base/data" "$base/tmp"
    cp /etc/activemq/instances-available/main/log4j2.properties "$base/conf/" 2>/dev/null || true
    cat >"$base/conf/activemq.xml" <<EOF
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="ringlog-peer"
          dataDirectory="$base/data" persistent="true">
    <persistenceAdapter>
      <!-- Persistent, flushed asynchronously: the paper's ActiveMQ setup. -->
      <kahaDB directory="$base/data/kahadb" enableJournalDiskSyncs="false"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <!-- With a 1 GiB heap, 10 M queued messages drove the broker into
             garbage collection and publishing fell to ~40 msg/s; 3 GiB. -->
        <memoryUsage><memoryUsage percentOfJvmHeap="70"/></memoryUsage>
        <storeUsage><storeUsage limit="40 gb"/></storeUsage>
        <tempUsage><tempUsage limit="10 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:61613"/>
      <transportConnector name="openwire" uri="tcp://127.0.0.1:61616"/>
    </transportConnectors>
  </broker>
</beans>
EOF
    (cd "$base" && exec java -Xms3G -Xmx3G \
        -Dactivemq.home=/usr/share/activemq -Dactivemq.base="$base" \
        -Dactivemq.conf="$base/conf" -Dactivemq.data="$base/data" \
        -Djava.io.tmpdir="$base/tmp" \
        -jar "$activemq_jar" start "xbean:file:$base/conf/activemq.xml" \
        >"$base/stdout.log" 2>&1) &
    echo $! >"$base/activemq.pid"
    wait_port 61613 ActiveMQ "$base/stdout.log"
    echo "activemq: listening on 127.0.0.1:61613 (STOMP), data in $base/data/kahadb"
}

stop_activemq() {
    stop_by_pid "activemq"
}

case "${1:-}" in
    install) install ;;
    # `if`, not `want x && start_x`: a system not asked for must not leave
    # a failed test as the script's exit status (`start nats` exited 1).
    start)
        if want rabbitmq; then start_rabbitmq; fi
        if want activemq; then start_activemq; fi
        if want nats; then start_nats; fi
        if want redis; then start_redis; fi
        ;;
    stop)
        if want rabbitmq; then stop_rabbitmq; fi
        if want activemq; then stop_activemq; fi
        if want nats; then stop_nats; fi
        if want redis; then stop_redis; fi
        ;;
    status)
        port_open 5672 && echo "rabbitmq: up (127.0.0.1:5672)" || echo "rabbitmq: down"
        port_open 61613 && echo "activemq: up (127.0.0.1:61613)" || echo "activemq: down"
        port_open 4222 && echo "nats: up (127.0.0.1:4222)" || echo "nats: down"
        port_open 6379 && echo "redis: up (127.0.0.1:6379)" || echo "redis: down"
        ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
