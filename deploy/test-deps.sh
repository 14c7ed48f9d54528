#!/usr/bin/env bash
# Installs what the test suite runs besides ringlog itself, from Debian's
# packages: etcd (the cluster tests start a real one on free loopback
# ports), the paper's competitors RabbitMQ and ActiveMQ and today's peers
# NATS and Redis (the peer test drives them through loadgen), and a C++
# compiler for the fuzz targets, and iproute2 (`ip`: the fault harness puts
# etcd and each broker in its own network namespace). The tests start and stop every one of them
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

missing=()
[[ -x /usr/bin/etcd ]] || missing+=(etcd-server)
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || missing+=(rabbitmq-server)
[[ -f /usr/share/activemq/bin/activemq.jar ]] || missing+=(activemq)
[[ -x /usr/sbin/nats-server ]] || missing+=(nats-server)
[[ -x /usr/bin/redis-server ]] || missing+=(redis-server)
# The fuzz targets link libFuzzer, which the libfuzzer-sys crate compiles
# from C++ source.
command -v c++ >/dev/null || missing+=(g++)
command -v ip >/dev/null || missing+=(iproute2)
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "test-deps: etcd, RabbitMQ, ActiveMQ, NATS, Redis, a C++ compiler and iproute2 are installed"
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
install_nextest
