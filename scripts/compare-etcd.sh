#!/usr/bin/env bash
# Side by side, in one run: etcd's own benchmark tool against a real etcd
# v3.5.17 3-member cluster and then against this project's 3-member
# cluster, both on loopback with the same flags, 1000 clients over 100
# connections:
#   put    8-byte sequential keys, 256-byte values, to the leader
#   range  linearizable, then serializable, over all members
# and etcd's watch benchmarks, over 10 connections:
#   watch-events   10 streams of 100 watchers on one key, TOTAL/100 puts:
#                  every put reaches all 1000 watchers (events/s received)
#   watch-latency  TOTAL/100 puts at 100/s to a watched key: how long each
#                  event takes to arrive (its requests/s is the put rate)
# Prints Requests/sec, average and p99 latency, the largest member RSS
# after the puts, the error count, the CPU the three members spent per
# request (user + system time from /proc, summed over members, divided by
# the row's requests; for watch-events, per 1000 events), and kv-server's
# ratio to etcd.
#   scripts/compare-etcd.sh [TOTAL]      (default 100000, etcd's documented size)
# KV_SERVER_BIN picks the kv-server binary (default: a release build made
# here). OTHER_KV_SERVER_BIN adds a second kv-server (named kv-before) to
# the same run, for before/after comparisons of a change.
# Needs etcd's tools (../shared/peers/build.sh, or ETCD_BIN and
# ETCD_BENCHMARK_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-100000}
if [ -z "${ETCD_BIN:-}" ] || [ -z "${ETCD_BENCHMARK_BIN:-}" ]; then
    peers=$(scripts/etcd-peers.sh)
    ETCD_BIN=${ETCD_BIN:-$peers/etcd}
    ETCD_BENCHMARK_BIN=${ETCD_BENCHMARK_BIN:-$peers/etcd-benchmark}
fi
if [ -z "${KV_SERVER_BIN:-}" ]; then
    cargo build --release -p kv-server >&2
    KV_SERVER_BIN=target/release/kv-server
fi
ticks=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/etcd" || true; scripts/local-cluster.sh stop "$work/kv-server" || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379

# Clock ticks of user + system time the members in DIR/pids have used.
member_ticks() {  # dir
    local pid sum=0
    while read -r pid; do
        sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done < "$1/pids"
    echo "$sum"
}

row() {  # server workload report rss cpu-ticks requests
    local qps avg p99 errors cpu
    qps=$(echo "$3" | awk '/Requests\/sec:/ {print $2}')
    avg=$(echo "$3" | awk '/Average:/ {print $2}')
    p99=$(echo "$3" | awk '/ 99% in/ {print $3}')
    errors=$(echo "$3" | grep -c "Error distribution" || true)
    cpu=$(awk -v t="$5" -v n="$6" -v hz="$ticks" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    printf '%-10s %-14s %12s %10s %10s %8s %7s %10s\n' "$1" "$2" "$qps" "$avg" "$p99" "$4" "$errors" "$cpu"
    echo "$qps" > "$work/$1.$2"
}

measure() {  # server binary
    local name=$1 binary=$2 dir="$work/$1"
    scripts/local-cluster.sh start "$binary" "$dir"
    local report rss=0 pid member_rss before
    before=$(member_ticks "$dir")
    report=$("$ETCD_BENCHMARK_BIN" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --val-size=256 --total="$total" 2>&1)
    while read -r pid; do
        member_rss=$(ps -o rss= -p "$pid" | tr -d ' ')
        [ "${member_rss:-0}" -gt "$rss" ] && rss=$member_rss
    done < "$dir/pids"
    row "$name" put "$report" "$((rss / 1024))" "$(($(member_ticks "$dir") - before))" "$total"
    for consistency in l s; do
        before=$(member_ticks "$dir")
        report=$("$ETCD_BENCHMARK_BIN" --endpoints=$endpoints --conns=100 --clients=1000 \
            range foo --consistency=$consistency --total="$total" 2>&1)
        row "$name" "range-$consistency" "$report" "-" "$(($(member_ticks "$dir") - before))" "$total"
    done
    before=$(member_ticks "$dir")
    report=$("$ETCD_BENCHMARK_BIN" --endpoints=$endpoints --conns=10 --clients=10 \
        watch --streams=10 --watch-per-stream=100 --watched-key-total=1 --put-total=$((total / 100)) 2>&1)
    # The tool prints two summaries; the second counts events received
    # (1000 per put), so CPU is per 1000 events.
    row "$name" watch-events "$(echo "$report" | sed -n '/Watch events received summary/,$p')" "-" \
        "$(($(member_ticks "$dir") - before))" "$((total / 100))"
    before=$(member_ticks "$dir")
    report=$("$ETCD_BENCHMARK_BIN" --endpoints=$endpoints \
        watch-latency --total=$((total / 100)) --put-rate=100 2>&1)
    row "$name" watch-latency "$report" "-" "$(($(member_ticks "$dir") - before))" "$((total / 100))"
    scripts/local-cluster.sh stop "$dir"
}

printf '1000 clients over 100 conns, %s requests per row, 3 members on loopback, %s\n' "$total" "$(date -u +%F)"
printf '%-10s %-14s %12s %10s %10s %8s %7s %10s\n' server workload requests/s "avg (s)" "p99 (s)" "RSS MB" errors "CPU us/req"
measure etcd "$ETCD_BIN"
measure kv-server "$KV_SERVER_BIN"
if [ -n "${OTHER_KV_SERVER_BIN:-}" ]; then
    measure kv-before "$OTHER_KV_SERVER_BIN"
fi
for workload in put range-l range-s watch-events; do
    for name in kv-server ${OTHER_KV_SERVER_BIN:+kv-before}; do
        awk -v a="$(cat "$work/$name.$workload")" -v b="$(cat "$work/etcd.$workload")" -v w="$workload" -v n="$name" \
            'BEGIN { printf "ratio %s / etcd, %-12s %.2f\n", n, w, a / b }'
    done
done
