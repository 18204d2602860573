#!/usr/bin/env bash
# Side-by-side put throughput, in one run: etcd's own benchmark tool puts
# 8-byte sequential keys with 256-byte values, 1000 clients over 100
# connections, against a real etcd v3.5.17 3-member cluster and then
# against this project's 3-member cluster, both on loopback with the same
# flags. Prints each Requests/sec, average and p99 latency, leader RSS,
# errors, and the ratio.
#   scripts/compare-put.sh [TOTAL]      (default 100000, etcd's documented size)
# Needs etcd's tools (../shared/peers/build.sh, or ETCD_BIN and
# ETCD_BENCHMARK_BIN) and a release build of kv-server (built here).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-100000}
if [ -z "${ETCD_BIN:-}" ] || [ -z "${ETCD_BENCHMARK_BIN:-}" ]; then
    peers=$(bash ../shared/peers/build.sh | tail -n 1)
    ETCD_BIN=${ETCD_BIN:-$peers/etcd}
    ETCD_BENCHMARK_BIN=${ETCD_BENCHMARK_BIN:-$peers/etcd-benchmark}
fi
cargo build --release -p kv-server >&2
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/etcd" || true; scripts/local-cluster.sh stop "$work/kv" || true; rm -rf "$work"' EXIT

measure() {  # name binary dir
    local name=$1 binary=$2 dir=$3
    scripts/local-cluster.sh start "$binary" "$dir"
    local report
    report=$("$ETCD_BENCHMARK_BIN" --endpoints=127.0.0.1:2379 --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --val-size=256 --total="$total" 2>&1)
    local rss=0 pid
    while read -r pid; do
        local member_rss
        member_rss=$(ps -o rss= -p "$pid" | tr -d ' ')
        [ "${member_rss:-0}" -gt "$rss" ] && rss=$member_rss
    done < "$dir/pids"
    scripts/local-cluster.sh stop "$dir"
    local qps avg p99 errors
    qps=$(echo "$report" | awk '/Requests\/sec:/ {print $2}')
    avg=$(echo "$report" | awk '/Average:/ {print $2}')
    p99=$(echo "$report" | awk '/ 99% in/ {print $3}')
    errors=$(echo "$report" | grep -c "Error distribution" || true)
    printf '%-10s %12s %12s %12s %10s %8s\n' "$name" "$qps" "$avg" "$p99" "$((rss / 1024))" "$errors"
    echo "$qps" > "$work/$name.qps"
}

printf 'put, 1000 clients over 100 conns, %s requests, 3 members on loopback, %s\n' "$total" "$(date -u +%F)"
printf '%-10s %12s %12s %12s %10s %8s\n' server requests/s "avg (s)" "p99 (s)" "max RSS MB" errors
measure etcd "$ETCD_BIN" "$work/etcd"
measure kv-server target/release/kv-server "$work/kv"
awk -v a="$(cat "$work/kv-server.qps")" -v b="$(cat "$work/etcd.qps")" 'BEGIN { printf "ratio kv-server / etcd: %.2f\n", a / b }'
