#!/usr/bin/env bash
# Issue 9, item 2 / design 0010: A/B of builds on the 1,000-partition
# produce. For each build directory given (each holding broker, ringlog and
# loadgen), alternating, R rounds: a fresh broker (2 shards), 4,000,000 x
# 200 B to one partition from P1 producers, then to 1,000 partitions from
# 32 producers (batch 50, acks written); prints both rates, their ratio and
# the broker's and loadgen's CPU seconds.
#   R=3 P1=1 bash ab.sh OLD/target/release NEW/target/release
set -euo pipefail
rounds=${R:-3}
p1=${P1:-1}
port=19850
cpu_of() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }
run() {
    local bin=$1 data
    data=$(mktemp -d)
    "$bin/broker" --data-dir "$data" --listen 127.0.0.1:$port --shards 2 >"$data.log" 2>&1 &
    local pid=$!
    until "$bin/ringlog" --brokers 127.0.0.1:$port topic list >/dev/null 2>&1; do sleep 0.05; done
    "$bin/ringlog" --brokers 127.0.0.1:$port topic create wide --partitions 1000 >/dev/null
    local out=""
    for phase in "one 1 $p1" "wide 1000 32"; do
        set -- $phase
        local c0 t0 t1 rate
        c0=$(cpu_of $pid)
        t0=$(mktemp)
        rate=$(/usr/bin/time -o "$t0" -f "%U %S" "$bin/loadgen" --brokers 127.0.0.1:$port produce \
            --topic "$1" --partitions "$2" --producers "$3" --batch 50 --acks written \
            --messages 4000000 | grep "records sent" | tail -1 | sed 's/.*sent, \([0-9.]*\) records.*/\1/')
        out="$out $rate $(echo "$(cpu_of $pid) - $c0" | bc) $(awk '{print $1+$2}' "$t0")"
        rm -f "$t0"
    done
    kill $pid; wait $pid || true
    rm -rf "$data" "$data.log"
    echo "$out"
}
for _ in $(seq 1 "$rounds"); do
    for bin in "$@"; do
        read -r one one_broker one_lg wide wide_broker wide_lg <<<"$(run "$bin")"
        printf "%-40s one %9.0f  wide %9.0f  ratio %.2f | broker cpu %s / %s s | loadgen cpu %s / %s s\n" \
            "$bin" "$one" "$wide" "$(echo "$wide / $one" | bc -l)" "$one_broker" "$wide_broker" "$one_lg" "$wide_lg"
    done
done
