#!/usr/bin/env bash
# Two kv-server builds side by side in one run: etcd's benchmark tool
# puts (1000 clients over 100 connections, 8-byte sequential keys,
# 256-byte values, to the leader) against a fresh 3-member cluster of
# each, alternating A and B, ROUNDS times, so drift on a noisy machine
# hits both alike. Prints requests/s, p99 and the CPU the three members
# spent per put (user + system time from /proc), the largest member's
# RSS after the puts and the members' context switches per put, for
# every run. MEMBER_CPUS and TOOL_CPUS pin them (see compare-etcd.sh);
# RATE=N puts open-loop at N/s (the tool's --rate); CLIENTS=N changes
# the 1000 clients (over at most 100 connections). RANGE=l or RANGE=s runs
# single-key ranges (linearizable or serializable) instead of puts.
#   scripts/ab-put.sh A_BIN B_BIN [TOTAL] [ROUNDS]   (default 100000, 5)
# For what metrics cost: B built with `cargo build --release -p kv-server
# --no-default-features` (into another target dir). Needs etcd's
# benchmark tool (tools/etcd-peers/build.sh, or ETCD_BENCHMARK_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?usage: ab-put.sh A_BIN B_BIN [TOTAL] [ROUNDS]}
b=${2:?usage: ab-put.sh A_BIN B_BIN [TOTAL] [ROUNDS]}
total=${3:-100000}
rounds=${4:-5}
clients=${CLIENTS:-1000}
# etcd_tools
source scripts/bench-tools.sh
etcd_tools ETCD_BENCHMARK_BIN
# member_ticks, bench, bench_figures
source scripts/member-stats.sh
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/run" || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379

run() {  # label binary
    local dir="$work/run"
    rm -rf "$dir"
    scripts/local-cluster.sh start "$2" "$dir"
    local load=(put --key-size=8 --sequential-keys --val-size=256)
    [ -z "${RANGE:-}" ] || load=(range foo --consistency="$RANGE")
    bench "$dir" --endpoints=$endpoints --target-leader --conns=$((clients < 100 ? clients : 100)) --clients=$clients \
        "${load[@]}" --total="$total" ${RATE:+--rate="$RATE"}
    rss=$(($(max_rss_kb "$dir") / 1024))
    scripts/local-cluster.sh stop "$dir"
    bench_figures "$1" "$total"
    printf '%-6s %-3s %12s %10s %10s %12s %8s %8s\n' "$round" "$1" "$QPS" "$AVG" "$P99" "$CPU" "$rss" \
        "$(awk -v s="$SWITCHES" -v n="$total" 'BEGIN { printf "%.2f", s / n }')"
}

printf '%s, %s clients, %s requests per run, 3 members on loopback, %s, %s cores\n' "$([ -n "${RANGE:-}" ] && echo "range --consistency=$RANGE" || echo put)" "$clients" "$total" "$(date -u +%F)" "$(nproc)"
printf 'A: %s\nB: %s\n' "$a" "$b"
printf '%-6s %-3s %12s %10s %10s %12s %8s %8s\n' round run requests/s "avg (s)" "p99 (s)" "members us" "RSS MB" cs/put
for round in $(seq 1 "$rounds"); do
    run A "$a"
    run B "$b"
done
