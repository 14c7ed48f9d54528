#!/usr/bin/env bash
# The paper's competitors and today's peers, on loopback, for `loadgen paper`:
#   RabbitMQ 3.10 (Debian rabbitmq-server): AMQP 0-9-1 on 127.0.0.1:5672
#   ActiveMQ 5.17 (Debian activemq):        STOMP on 127.0.0.1:61613
#   NATS 2.9 (Debian nats-server):          JetStream, file storage, on 127.0.0.1:4222
#   Redis 7.0 (Debian redis-server):        Streams, AOF fsync everysec, on 127.0.0.1:6379
#   Apache Kafka 4.4.0 (jars from Maven Central, deploy/kafka/pom.xml):
#     KRaft, one combined broker+controller on 127.0.0.1:29092 (`kafka`),
#     or three on 29192, 29292, 29392 (`kafka-cluster`, R=3 possible), or one
#     on 29492 (`kafka-oracle`: the Kafka listener's differential test)
#   NATS 2.9 as three JetStream servers on 4322, 4332, 4342 (`nats-cluster`, R=3)
# Each starts with a fresh data directory under $RINGLOG_PEERS_DIR (default
# /tmp/ringlog-peers) and persistent storage flushed asynchronously, as in
# the paper (RabbitMQ's message store fsyncs in the background; ActiveMQ's
# KahaDB runs with enableJournalDiskSyncs="false").
#
# NATS flushes JetStream files on its own interval (sync_interval, 2 min
# by default) and Redis fsyncs its append-only file every second: both
# asynchronous, like the others here. Kafka runs with its own defaults, as
# a Kafka operator would for a benchmark: log.flush.interval.messages and
# .ms unset, so it never fsyncs a message itself (the OS writes the page
# cache back; durability comes from replication), 1 GiB heap per JVM.
#
#   deploy/peers.sh install [kafka]    apt-get install the four (needs root); `kafka`: Kafka's jars with Maven
#   deploy/peers.sh start [SYSTEM]     start all (NATS, Redis and Kafka if installed), or rabbitmq / activemq / nats / redis / kafka / kafka-cluster / kafka-oracle / nats-cluster
#                                      (each cluster node's start.sh starts it again on its data after a kill)
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

# ---- Apache Kafka ----

kafka_version=4.4.0
# Kafka's jars: under the peers directory, or where RINGLOG_KAFKA_HOME says
# (the test suite's peers run in directories of their own and share one
# install, deploy/test-deps.sh's).
kafka_home="${RINGLOG_KAFKA_HOME:-$dir/kafka-$kafka_version}"
here="$(cd "$(dirname "$0")" && pwd)"

# Resolves Kafka's jars (pinned in deploy/kafka/pom.xml) into $kafka_home/libs.
install_kafka() {
    command -v java >/dev/null || { echo "peers.sh: Kafka needs Java 17 (java is not on PATH)" >&2; return 1; }
    command -v mvn >/dev/null || { echo "peers.sh: Kafka's jars are resolved with Maven (mvn is not on PATH)" >&2; return 1; }
    rm -rf "$kafka_home.partial"
    mkdir -p "$kafka_home.partial"
    mvn -q -B -f "$here/kafka/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$kafka_home.partial/libs" >"$kafka_home.partial/mvn.log" 2>&1 \
        || { echo "peers.sh: Maven could not resolve Kafka's jars:" >&2; tail -20 "$kafka_home.partial/mvn.log" >&2; return 1; }
    rm -rf "$kafka_home"
    mv "$kafka_home.partial" "$kafka_home"
    kafka_driver
    echo "kafka: $kafka_version installed in $kafka_home ($(ls "$kafka_home/libs" | wc -l) jars)"
}

kafka_installed() { [[ -f "$kafka_home/libs/kafka_2.13-$kafka_version.jar" ]]; }

# Compiles loadgen's driver (deploy/kafka/PaperDriver.java) on Kafka's
# client into $kafka_home/driver, when missing or older than its source.
kafka_driver() {
    local class="$kafka_home/driver/PaperDriver.class" source="$here/kafka/PaperDriver.java"
    [[ -f "$class" && ! "$source" -nt "$class" ]] && return 0
    javac -nowarn -cp "$kafka_home/libs/*" -d "$kafka_home/driver" "$source"
}

kafka_jvm=(java -Xms1G -Xmx1G -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    "-Dlog4j2.configurationFile=$kafka_home/log4j2.yaml" -cp "$kafka_home/libs/*")
kafka_java() { "${kafka_jvm[@]}" "$@"; }

# Writes node NODE's configuration into BASE: client port PORT, its
# controller port PORT+1, the voters VOTERS (id@host:port,...), internal
# topics with REPLICAS copies.
kafka_config() {
    local base=$1 node=$2 port=$3 voters=$4 replicas=$5
    mkdir -p "$base/data"
    cat >"$base/server.properties" <<EOF
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$base/data
num.partitions=1
offsets.topic.replication.factor=$replicas
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
}

kafka_log_config() {
    cat >"$kafka_home/log4j2.yaml" <<'EOF'
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.request.logger
        level: WARN
EOF
}

# Writes BASE/start.sh, which starts COMMAND... in the background, its
# output appended to BASE/server.log, its pid in BASE/NAME.pid: the node's
# start, and its restart on the same data after a kill (loadgen's
# failover measurement runs it).
node_script() {
    local base=$1 name=$2
    shift 2
    {
        echo '#!/usr/bin/env bash'
        # Output to a file: a caller reading this script's output waits
        # for every writer of the pipe to close it. exec: the pid is the
        # server's own, so that stop stops it.
        printf '(exec'
        printf ' %q' "$@"
        printf ') >>%q 2>&1 </dev/null &\n' "$base/server.log"
        printf 'echo $! >%q\n' "$base/$name.pid"
    } >"$base/start.sh"
}

# Starts Kafka nodes 1..COUNT as NAME, client ports from BASE_PORT in
# steps of 100 (each node's controller listens one above its client port).
start_kafka_nodes() {
    local name=$1 count=$2 base_port=$3
    if ! kafka_installed; then
        if [[ "$what" == all ]]; then echo "$name: not installed, skipped (deploy/peers.sh install kafka)"; return 0; fi
        echo "peers.sh: Kafka is not installed: run deploy/peers.sh install kafka" >&2
        return 1
    fi
    kafka_driver
    if port_open "$base_port"; then echo "$name: already listening on 127.0.0.1:$base_port"; return 0; fi
    local base="$dir/$name" voters="" node port cluster_id
    rm -rf "$base"
    for node in $(seq "$count"); do
        port=$((base_port + (node - 1) * 100))
        voters="${voters:+$voters,}$node@127.0.0.1:$((port + 1))"
    done
    kafka_log_config
    cluster_id="$(kafka_java kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    for node in $(seq "$count"); do
        port=$((base_port + (node - 1) * 100))
        kafka_config "$base/node-$node" "$node" "$port" "$voters" "$count"
        kafka_java kafka.tools.StorageTool format -t "$cluster_id" \
            -c "$base/node-$node/server.properties" >"$base/node-$node/format.log" 2>&1 \
            || { echo "peers.sh: formatting Kafka node $node failed:" >&2; tail -5 "$base/node-$node/format.log" >&2; return 1; }
        node_script "$base/node-$node" kafka "${kafka_jvm[@]}" kafka.Kafka "$base/node-$node/server.properties"
        bash "$base/node-$node/start.sh"
    done
    for node in $(seq "$count"); do
        port=$((base_port + (node - 1) * 100))
        wait_port "$port" "Kafka node $node" "$base/node-$node/server.log"
    done
    if ((count > 1)); then
        echo "$name: $count nodes listening on 127.0.0.1:$base_port, :$((base_port + 100)), :$((base_port + 200)) (KRaft, cluster $cluster_id), data in $base"
    else
        echo "$name: listening on 127.0.0.1:$base_port (KRaft, cluster $cluster_id), data in $base"
    fi
}

# Stops NAME's nodes (SIGTERM, then SIGKILL after 30 s) and deletes their data.
stop_kafka_nodes() {
    local name=$1 base="$dir/$1" pidfile pid
    [[ -d "$base" ]] || return 0
    for pidfile in "$base"/node-*/kafka.pid; do
        [[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    for pidfile in "$base"/node-*/kafka.pid; do
        [[ -f "$pidfile" ]] || continue
        pid="$(cat "$pidfile")"
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$base"
    echo "$name: stopped"
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

# Three JetStream servers in one cluster (clients on 4322, 4332, 4342;
# routes on 6322, 6332, 6342), for streams of three copies: a publish is
# acknowledged once a majority of the stream's copies stored it.
start_nats_cluster() {
    command -v nats-server >/dev/null || { echo "peers.sh: NATS is not installed: run deploy/peers.sh install" >&2; return 1; }
    if port_open 4322; then echo "nats-cluster: already listening on 127.0.0.1:4322"; return 0; fi
    local base="$dir/nats-cluster" node routes=""
    rm -rf "$base"
    for node in 1 2 3; do routes="${routes:+$routes, }nats-route://127.0.0.1:$((6312 + node * 10))"; done
    for node in 1 2 3; do
        mkdir -p "$base/node-$node/jetstream"
        cat >"$base/node-$node/nats.conf" <<EOF
server_name: n$node
listen: 127.0.0.1:$((4312 + node * 10))
jetstream {
  store_dir: "$base/node-$node/jetstream"
  max_memory_store: 1GB
  max_file_store: 40GB
}
cluster {
  name: ringlog-peers
  listen: 127.0.0.1:$((6312 + node * 10))
  routes: [$routes]
}
EOF
        node_script "$base/node-$node" nats nats-server -c "$base/node-$node/nats.conf"
        bash "$base/node-$node/start.sh"
    done
    for node in 1 2 3; do wait_port $((4312 + node * 10)) "NATS node $node" "$base/node-$node/server.log"; done
    echo "nats-cluster: 3 servers listening on 127.0.0.1:4322, :4332, :4342 (JetStream, cluster ringlog-peers), data in $base"
}

stop_nats_cluster() {
    local base="$dir/nats-cluster" pidfile pid
    [[ -d "$base" ]] || return 0
    for pidfile in "$base"/node-*/nats.pid; do
        [[ -f "$pidfile" ]] || continue
        pid="$(cat "$pidfile")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$base"
    echo "nats-cluster: stopped"
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
    install)
        if [[ "${2:-}" == kafka ]]; then install_kafka; else install; fi
        ;;
    # `if`, not `want x && start_x`: a system not asked for must not leave
    # a failed test as the script's exit status (`start nats` exited 1).
    start)
        if want rabbitmq; then start_rabbitmq; fi
        if want activemq; then start_activemq; fi
        if want nats; then start_nats; fi
        if want redis; then start_redis; fi
        if want kafka; then start_kafka_nodes kafka 1 29092; fi
        # Three JVMs: only when asked for by name.
        if [[ "$what" == kafka-cluster ]]; then start_kafka_nodes kafka-cluster 3 29192; fi
        # One node of its own for the differential test (the Kafka
        # listener's answers compared with Kafka's own).
        if [[ "$what" == kafka-oracle ]]; then start_kafka_nodes kafka-oracle 1 29492; fi
        if [[ "$what" == nats-cluster ]]; then start_nats_cluster; fi
        ;;
    stop)
        if want rabbitmq; then stop_rabbitmq; fi
        if want activemq; then stop_activemq; fi
        if want nats; then stop_nats; fi
        if want redis; then stop_redis; fi
        if want kafka; then stop_kafka_nodes kafka; fi
        if want kafka-cluster; then stop_kafka_nodes kafka-cluster; fi
        if want kafka-oracle; then stop_kafka_nodes kafka-oracle; fi
        if want nats-cluster; then stop_nats_cluster; fi
        ;;
    status)
        port_open 5672 && echo "rabbitmq: up (127.0.0.1:5672)" || echo "rabbitmq: down"
        port_open 61613 && echo "activemq: up (127.0.0.1:61613)" || echo "activemq: down"
        port_open 4222 && echo "nats: up (127.0.0.1:4222)" || echo "nats: down"
        port_open 6379 && echo "redis: up (127.0.0.1:6379)" || echo "redis: down"
        port_open 29092 && echo "kafka: up (127.0.0.1:29092)" || echo "kafka: down"
        for port in 29192 29292 29392; do
            port_open "$port" && echo "kafka-cluster: node up (127.0.0.1:$port)" || echo "kafka-cluster: node down (127.0.0.1:$port)"
        done
        for port in 4322 4332 4342; do
            port_open "$port" && echo "nats-cluster: server up (127.0.0.1:$port)" || echo "nats-cluster: server down (127.0.0.1:$port)"
        done
        ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
