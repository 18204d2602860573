#!/usr/bin/env bash
# Watch benchmarks side by side, in one run: etcd 3.5.17, then etcd 3.7.3
# when it is built (ETCD37_BIN), then kv-server, each a fresh 3-member
# cluster on loopback. Rows:
#   watch          etcd's tool: 10 streams x 100 watchers on one key,
#                  TOTAL/100 puts, so every put reaches 1000 watchers;
#                  events received per second, member CPU per 1000 events
#   latency-100    etcd's tool's watch-latency at 100 puts/s (TOTAL/100 puts)
#   latency-10k    the same at 10,000 puts/s (TOTAL/5 puts)
#   memory         100,000 idle watchers on 100 streams over 10
#                  connections (loadgen watchers), all on member 1: its
#                  RSS growth divided by the watchers, in bytes
#   put            etcd's tool's put, 1000 clients over 100 connections to
#                  the leader, TOTAL puts: p99 and the largest member RSS
#   put-stalled    the same while 10 watch streams of every key stop
#                  reading (loadgen watchers --read=false), one per member
#                  connection, opened before the puts and held past them
# Prints one line per row, then kv-server's ratio to each etcd.
#   scripts/watch-bench.sh [TOTAL]     (default 100000)
# KV_SERVER_BIN and LOADGEN_BIN pick the binaries (default: release builds
# made here); WATCH_BENCH_KEEP=1 keeps the members' logs. Needs etcd's tools (tools/etcd-peers/build.sh, or ETCD_BIN
# and ETCD_BENCHMARK_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-100000}
# etcd_tools, our_binaries
source scripts/bench-tools.sh
etcd_tools ETCD_BIN ETCD_BENCHMARK_BIN
our_binaries kv-server loadgen
ticks=$(getconf CLK_TCK)
work=$(mktemp -d)
holder=
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null || true
    for dir in "$work"/*/; do
        [ -f "$dir/pids" ] && scripts/local-cluster.sh stop "$dir" || true
    done
    [ -n "${WATCH_BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
# How long loadgen may take to report its watchers created, in 0.1 s steps.
created_steps=1200
# Seconds the stalled streams are held: past any put row here.
stall_hold=600

# member_ticks, rss_kb, max_rss_kb, bench
source scripts/member-stats.sh

# Starts `loadgen watchers` in the background and waits until it reports
# every watcher created; sets holder to its pid.
hold_watchers() {  # log loadgen-args...
    local log=$1 step
    shift
    "$LOADGEN_BIN" "$@" > "$log" 2>&1 &
    holder=$!
    for step in $(seq 1 "$created_steps"); do
        grep -q "created" "$log" && return 0
        kill -0 "$holder" 2>/dev/null || break
        sleep 0.1
    done
    echo "loadgen watchers did not report its watchers created:" >&2
    cat "$log" >&2
    exit 1
}

stop_holder() {
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    holder=
}

line() {  # server row value unit [extra]
    printf '%-10s %-12s %14s %-16s %s\n' "$1" "$2" "$3" "$4" "${5:-}"
    echo "$3" > "$work/$1.$2"
}

measure() {  # server binary
    local name=$1 binary=$2 dir="$work/$1" report qps p99 cpu before after pid
    scripts/local-cluster.sh start "$binary" "$dir"

    bench "$dir" --endpoints=$endpoints --conns=10 --clients=10 \
        watch --streams=10 --watch-per-stream=100 --watched-key-total=1 --put-total=$((total / 100))
    report=$(echo "$REPORT" | sed -n '/Watch events received summary/,$p')
    qps=$(echo "$report" | awk '/Requests\/sec:/ {print $2}')
    cpu=$(awk -v t="$MEMBERS" -v n="$((total / 100))" -v hz="$ticks" 'BEGIN { printf "%.0f", t / hz * 1e6 / n }')
    line "$name" watch "$qps" "events/s" "members ${cpu} us per 1000 events"

    for row in "latency-100 100 $((total / 100))" "latency-10k 10000 $((total / 5))"; do
        set -- $row
        bench "$dir" --endpoints=$endpoints watch-latency --total="$3" --put-rate="$2"
        p99=$(echo "$REPORT" | awk '/ 99% in/ {print $3}' | tail -1)
        line "$name" "$1" "$p99" "s p99" "$(echo "$REPORT" | awk '/Average:/ {printf "average %s s", $2}' | tail -1)"
    done

    pid=$(head -1 "$dir/pids")
    before=$(rss_kb "$pid")
    hold_watchers "$work/$name.watchers.log" --endpoints 127.0.0.1:2379 --conns 10 \
        watchers --streams 100 --watch-per-stream 1000 --hold 30
    sleep 2
    after=$(rss_kb "$pid")
    stop_holder
    line "$name" memory "$(((after - before) * 1024 / 100000))" "B per watcher" \
        "member 1 RSS ${before} -> ${after} KiB"

    bench "$dir" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --val-size=256 --total="$total"
    p99=$(echo "$REPORT" | awk '/ 99% in/ {print $3}')
    line "$name" put "$p99" "s p99" "largest RSS $(($(max_rss_kb "$dir") / 1024)) MB"

    hold_watchers "$work/$name.stalled.log" --endpoints "$endpoints" --conns 3 \
        watchers --streams 10 --watch-per-stream 1 --read=false --hold "$stall_hold"
    bench "$dir" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --val-size=256 --total="$total"
    p99=$(echo "$REPORT" | awk '/ 99% in/ {print $3}')
    line "$name" put-stalled "$p99" "s p99" "largest RSS $(($(max_rss_kb "$dir") / 1024)) MB"
    stop_holder

    scripts/local-cluster.sh stop "$dir"
}

printf 'watch benchmarks, %s requests per put row, 3 members on loopback, %s\n' "$total" "$(date -u +%F)"
measure etcd "$ETCD_BIN"
others=()
if [ -x "${ETCD37_BIN:-}" ]; then
    measure etcd-3.7 "$ETCD37_BIN"
    others+=(etcd-3.7)
fi
measure kv-server "$KV_SERVER_BIN"
for row in watch latency-100 latency-10k memory put put-stalled; do
    for base in etcd "${others[@]}"; do
        awk -v a="$(cat "$work/kv-server.$row")" -v b="$(cat "$work/$base.$row")" -v r="$row" -v e="$base" \
            'BEGIN { if (b > 0) printf "ratio kv-server / %s, %-12s %.2f\n", e, r, a / b }'
    done
done
awk -v a="$(cat "$work/kv-server.put-stalled")" -v b="$(cat "$work/kv-server.put")" \
    'BEGIN { printf "kv-server put p99 with stalled streams / without: %.2f\n", a / b }'
