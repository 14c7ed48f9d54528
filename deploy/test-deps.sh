#!/usr/bin/env bash
# Installs what the test suite runs besides ringlog itself, from Debian's
# packages: etcd (the cluster tests start a real one on free loopback
# ports), the paper's competitors RabbitMQ and ActiveMQ and today's peers
# NATS and Redis (the peer test drives them through loadgen), kcat (the
# Kafka listener's tests), and a C++
# compiler for the fuzz targets, and iproute2 (`ip`: the fault harness puts
# etcd and each broker in its own network namespace); Java 17 and Maven,
# with which Apache Kafka 4.4's jars are resolved from Maven Central into
# /tmp/ringlog-peers/kafka-4.4.0 (`deploy/peers.sh install kafka`; the peer
# test runs Kafka from there). The tests start and stop every one of them
# themselves; nothing is left running. Then cargo-nextest, which runs the
# tests and which the Rust toolchain does not ship, from crates.io when it
# is missing. Idempotent: a machine that has them all runs no package
# manager. Needs root (or sudo) the first time.
set -euo pipefail

# `cargo install` builds it from source: a few minutes on two cores, once.
install_nextest() {
    if cargo nextest --version >/dev/null 2>&1; then
        echo "test-deps: cargo-nextest is installed"
        return 0
    fi
    echo "test-deps: installing cargo-nextest from crates.io (cargo install --locked; a few minutes, once)"
    cargo install cargo-nextest --locked
}

# Kafka's jars, once (Maven keeps its download cache in ~/.m2).
install_kafka() {
    local peers_dir=/tmp/ringlog-peers
    if [[ -f "$peers_dir/kafka-4.4.0/libs/kafka_2.13-4.4.0.jar" ]]; then
        echo "test-deps: Apache Kafka 4.4.0 is installed in $peers_dir/kafka-4.4.0"
        return 0
    fi
    echo "test-deps: installing Apache Kafka 4.4.0's jars with Maven into $peers_dir (a minute or two, once)"
    RINGLOG_PEERS_DIR="$peers_dir" RINGLOG_KAFKA_HOME= bash "$(dirname "$0")/peers.sh" install kafka
}

missing=()
[[ -x /usr/bin/etcd ]] || missing+=(etcd-server)
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || missing+=(rabbitmq-server)
[[ -f /usr/share/activemq/bin/activemq.jar ]] || missing+=(activemq)
[[ -x /usr/sbin/nats-server ]] || missing+=(nats-server)
[[ -x /usr/bin/redis-server ]] || missing+=(redis-server)
# The fuzz targets link libFuzzer, which the libfuzzer-sys crate compiles
# from C++ source.
command -v c++ >/dev/null || missing+=(g++)
# make: librdkafka's bundled build (loadgen's optional `librdkafka` feature,
# which CI checks).
command -v make >/dev/null || missing+=(make)
command -v ip >/dev/null || missing+=(iproute2)
command -v java >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
# kcat (librdkafka's command-line client): the Kafka listener's tests.
command -v kcat >/dev/null || missing+=(kcat)
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "test-deps: etcd, RabbitMQ, ActiveMQ, NATS, Redis, a C++ compiler, make, iproute2, Java, Maven and kcat are installed"
    install_kafka
    install_nextest
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "test-deps: installing ${missing[*]} needs root: run as root: apt-get install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
echo "test-deps: installing ${missing[*]} (Debian packages)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
# policy-rc.d refuses service starts during the install: the packages would
# otherwise start system-wide etcd/RabbitMQ/ActiveMQ on their default ports.
policy=/usr/sbin/policy-rc.d
had_policy=0
[[ -e $policy ]] && had_policy=1
if [[ $had_policy -eq 0 ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
fi
status=0
"${sudo[@]}" apt-get install -y -q "${missing[@]}" || status=$?
if [[ $had_policy -eq 0 ]]; then
    "${sudo[@]}" rm -f "$policy"
fi
[[ $status -eq 0 ]] || exit $status
install_kafka
install_nextest
