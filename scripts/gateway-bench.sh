#!/usr/bin/env bash
# What a request through etcd's gRPC-JSON gateway costs the members beside
# the same request over gRPC, on one kv-server 3-member cluster on
# loopback: loadgen sends puts (8-byte keys, 256-byte values) and then
# single-key linearizable ranges, at a fixed offered rate, once over gRPC
# (CLIENTS clients over 4 connections) and once through the gateway
# (`--gateway`: CLIENTS HTTP/1.1 keep-alive connections, as Patroni's and
# etcd3gw's pools), alternating, ROUNDS times, so drift on a noisy machine
# hits both alike. Prints each run's requests/s, average latency and the
# members' CPU per request (user + system time from /proc), then the
# medians and the gateway's CPU ratio to gRPC's.
#   scripts/gateway-bench.sh [TOTAL] [ROUNDS] [RATE]  (default 20000, 3, 2000)
# MEMBER_CPUS and TOOL_CPUS pin the members and loadgen (taskset lists,
# e.g. MEMBER_CPUS=1 TOOL_CPUS=0); CLIENTS sets the clients (16).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-20000}
rounds=${2:-3}
rate=${3:-2000}
clients=${CLIENTS:-16}
# our_binaries
source scripts/bench-tools.sh
our_binaries kv-server loadgen
# member_ticks, bench, bench_figures
source scripts/member-stats.sh
export BENCH_BIN=$LOADGEN_BIN
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/run" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
dir="$work/run"
scripts/local-cluster.sh start "$KV_SERVER_BIN" "$dir" >/dev/null
results="$work/results"

run() {  # transport workload [loadgen flags...]
    local transport=$1 workload=$2 via=()
    shift 2
    [ "$transport" = gateway ] && via=(--gateway)
    bench "$dir" --endpoints=$endpoints --target-leader --conns=4 --clients="$clients" ${via[@]+"${via[@]}"} "$@"
    bench_figures "$transport $workload" "$total"
    printf '%-6s %-8s %-6s %12s %10s %12s\n' "$round" "$transport" "$workload" "$QPS" "$AVG" "$CPU"
    echo "$workload $transport $CPU" >> "$results"
}

printf 'gateway vs gRPC, %s requests per run at %s/s, %s clients, 3 members on loopback, %s, %s cores\n' \
    "$total" "$rate" "$clients" "$(date -u +%F)" "$(nproc)"
printf 'members: %s; loadgen: %s\n' "${MEMBER_CPUS:-any CPU}" "${TOOL_CPUS:-any CPU}"
printf '%-6s %-8s %-6s %12s %10s %12s\n' round via load requests/s "avg (s)" "members us"
put=(put --key-size=8 --sequential-keys --val-size=256 --total="$total" --rate="$rate")
range=(range foo --total="$total" --rate="$rate")
for round in $(seq 1 "$rounds"); do
    run grpc put "${put[@]}"
    run gateway put "${put[@]}"
    run grpc range "${range[@]}"
    run gateway range "${range[@]}"
done

median() {  # workload transport
    awk -v w="$1" -v t="$2" '$1 == w && $2 == t { print $3 }' "$results" | sort -n |
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
printf '%-6s %14s %14s %8s\n' load "grpc us/req" "gateway us/req" ratio
for workload in put range; do
    g=$(median "$workload" grpc)
    j=$(median "$workload" gateway)
    printf '%-6s %14s %14s %8s\n' "$workload" "$g" "$j" "$(awk -v g="$g" -v j="$j" 'BEGIN { printf "%.2f", j / g }')"
done
