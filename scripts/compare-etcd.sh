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
# and a single client's puts (put-1-client, a tenth of TOTAL).
# Runs etcd 3.5.17, then etcd 3.7.3 when it is built (ETCD37_BIN), then
# kv-server. Prints Requests/sec, average and p99 latency, the largest
# member RSS after the puts, the error count, the CPU the three members
# spent per request (user + system time from /proc, summed over members,
# divided by the row's requests; for watch-events, per 1000 events), the
# CPU etcd's benchmark tool itself spent per request (it shares the
# machine), and kv-server's ratio to each etcd.
# Each row also gives the members' context switches per request
# (voluntary and involuntary, all threads, from /proc) and, for kv-server,
# the raft messages its members sent per request (its own metric).
#   scripts/compare-etcd.sh [--pin] [--rate N] [TOTAL]
#     TOTAL    requests per row (default 100000, etcd's documented size)
#     --pin    the members on CPU 1 and etcd's tool on CPU 0 (taskset), so
#              Go's GOMAXPROCS and tokio's workers follow the affinity
#     --rate N the put and range rows open-loop at N requests/s (the
#              tool's --rate), to compare CPU at the same offered load
# KV_SERVER_BIN picks the kv-server binary (default: a release build made
# here). OTHER_KV_SERVER_BIN adds a second kv-server (named kv-before) to
# the same run, for before/after comparisons of a change.
# Needs etcd's tools (tools/etcd-peers/build.sh, or ETCD_BIN and
# ETCD_BENCHMARK_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
total=100000
rate=()
while [ $# -gt 0 ]; do
    case "$1" in
    --pin) export MEMBER_CPUS=1 TOOL_CPUS=0; shift ;;
    --rate) rate=(--rate "${2:?--rate N}"); shift 2 ;;
    *) total=$1; shift ;;
    esac
done
# etcd_tools, our_binaries
source scripts/bench-tools.sh
etcd_tools ETCD_BIN ETCD_BENCHMARK_BIN
our_binaries kv-server
ticks=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/etcd" || true; scripts/local-cluster.sh stop "$work/kv-server" || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379

# member_ticks, max_rss_kb, bench
source scripts/member-stats.sh

row() {  # server workload report rss member-ticks tool-ticks requests
    local qps avg p99 errors cpu tool switches messages
    qps=$(echo "$3" | awk '/Requests\/sec:/ {print $2}')
    avg=$(echo "$3" | awk '/Average:/ {print $2}')
    p99=$(echo "$3" | awk '/ 99% in/ {print $3}')
    errors=$(echo "$3" | grep -c "Error distribution" || true)
    cpu=$(awk -v t="$5" -v n="$7" -v hz="$ticks" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    tool=$(awk -v t="$6" -v n="$7" -v hz="$ticks" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    switches=$(awk -v s="$SWITCHES" -v n="$7" 'BEGIN { printf "%.2f", s / n }')
    messages=$(($(raft_messages_sent "$endpoints") - messages_before))
    messages=$(awk -v m="$messages" -v n="$7" 'BEGIN { if (m == 0) print "-"; else printf "%.2f", m / n }')
    printf '%-10s %-14s %12s %10s %10s %8s %7s %10s %10s %8s %8s\n' "$1" "$2" "$qps" "$avg" "$p99" "$4" "$errors" \
        "$cpu" "$tool" "$switches" "$messages"
    echo "$qps" > "$work/$1.$2"
}

# Runs one row's benchmark (see bench), counting the raft messages sent.
bench_row() {  # dir tool-args...
    messages_before=$(raft_messages_sent "$endpoints")
    bench "$@"
}

measure() {  # server binary
    local name=$1 binary=$2 dir="$work/$1"
    scripts/local-cluster.sh start "$binary" "$dir"
    bench_row "$dir" --endpoints=$endpoints --target-leader --conns=1 --clients=1 \
        put --key-size=8 --sequential-keys --val-size=256 --total=$((total / 10))
    row "$name" put-1-client "$REPORT" "-" "$MEMBERS" "$TOOL" $((total / 10))
    bench_row "$dir" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --val-size=256 --total="$total" ${rate[@]+"${rate[@]}"}
    row "$name" put "$REPORT" "$(($(max_rss_kb "$dir") / 1024))" "$MEMBERS" "$TOOL" "$total"
    for consistency in l s; do
        bench_row "$dir" --endpoints=$endpoints --conns=100 --clients=1000 \
            range foo --consistency=$consistency --total="$total" ${rate[@]+"${rate[@]}"}
        row "$name" "range-$consistency" "$REPORT" "-" "$MEMBERS" "$TOOL" "$total"
    done
    bench_row "$dir" --endpoints=$endpoints --conns=10 --clients=10 \
        watch --streams=10 --watch-per-stream=100 --watched-key-total=1 --put-total=$((total / 100))
    # The tool prints two summaries; the second counts events received
    # (1000 per put), so CPU is per 1000 events.
    row "$name" watch-events "$(echo "$REPORT" | sed -n '/Watch events received summary/,$p')" "-" \
        "$MEMBERS" "$TOOL" "$((total / 100))"
    bench_row "$dir" --endpoints=$endpoints watch-latency --total=$((total / 100)) --put-rate=100
    row "$name" watch-latency "$REPORT" "-" "$MEMBERS" "$TOOL" "$((total / 100))"
    scripts/local-cluster.sh stop "$dir"
}

printf '%s requests per row (put-1-client: a tenth), 3 members on loopback, %s%s%s\n' "$total" "$(date -u +%F)" \
    "${MEMBER_CPUS:+, members on CPU $MEMBER_CPUS and the tool on CPU $TOOL_CPUS}" \
    "${rate[1]:+, put and range at ${rate[1]}/s}"
printf '%-10s %-14s %12s %10s %10s %8s %7s %10s %10s %8s %8s\n' server workload requests/s "avg (s)" "p99 (s)" "RSS MB" \
    errors "members us" "tool us" "cs/req" "msgs/req"
measure etcd "$ETCD_BIN"
others=()
if [ -x "${ETCD37_BIN:-}" ]; then
    measure etcd-3.7 "$ETCD37_BIN"
    others+=(etcd-3.7)
fi
measure kv-server "$KV_SERVER_BIN"
if [ -n "${OTHER_KV_SERVER_BIN:-}" ]; then
    measure kv-before "$OTHER_KV_SERVER_BIN"
fi
for workload in put-1-client put range-l range-s watch-events; do
    for name in kv-server ${OTHER_KV_SERVER_BIN:+kv-before}; do
        for base in etcd "${others[@]}"; do
            awk -v a="$(cat "$work/$name.$workload")" -v b="$(cat "$work/$base.$workload")" -v w="$workload" \
                -v n="$name" -v e="$base" 'BEGIN { printf "ratio %s / %s, %-12s %.2f\n", n, e, w, a / b }'
        done
    done
done
