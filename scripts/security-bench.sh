#!/usr/bin/env bash
# What TLS and auth cost, side by side in one run: etcd's benchmark tool
# puts (1000 clients over 100 connections, 8-byte sequential keys,
# 256-byte values, to the leader) against a real etcd 3.5.17 3-member
# cluster and this project's, each in three modes:
#   plain  http:// URLs, auth off
#   tls    https:// client and peer URLs with certificate auth on both
#          (certificates from scripts/make-certs.sh)
#   auth   http://, auth on, as a user whose role grants readwrite on
#          every key (so each put's permission is checked, not waved
#          through as root's would be); --bcrypt-cost 4 on both servers
#          so the 100 logins do not weigh in the CPU figures
# Modes alternate between the servers, ROUNDS times, so drift on a noisy
# machine hits both alike. Prints, per run, requests/s, p99 latency and
# the CPU the three members spent per request (user + system time from
# /proc, summed over members).
#   scripts/security-bench.sh [TOTAL] [ROUNDS]   (default 100000, 3)
# KV_SERVER_BIN picks the kv-server binary (default: a release build made
# here). Needs etcd's tools (tools/etcd-peers/build.sh, or ETCD_BIN,
# ETCDCTL_BIN and ETCD_BENCHMARK_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-100000}
rounds=${2:-3}
# etcd_tools, our_binaries
source scripts/bench-tools.sh
etcd_tools ETCD_BIN ETCD_BENCHMARK_BIN ETCDCTL_BIN
our_binaries kv-server
# member_ticks, bench, bench_figures
source scripts/member-stats.sh
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/run" || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
scripts/make-certs.sh "$work/certs"
client_tls=(--cacert="$work/certs/ca.pem" --cert="$work/certs/client.pem" --key="$work/certs/client-key.pem")

# Turns auth on with a user "bench" holding readwrite on every key.
enable_auth() {
    local ctl=("$ETCDCTL_BIN" --endpoints=127.0.0.1:2379)
    "${ctl[@]}" user add root --new-user-password=rootpw > /dev/null
    "${ctl[@]}" user add bench --new-user-password=benchpw > /dev/null
    "${ctl[@]}" role add bench > /dev/null
    "${ctl[@]}" role grant-permission bench readwrite '' --prefix > /dev/null
    "${ctl[@]}" user grant-role bench bench > /dev/null
    "${ctl[@]}" auth enable > /dev/null 2>&1
}

run() {  # server binary mode
    local server=$1 binary=$2 mode=$3 dir="$work/run" flags=() client=()
    case "$mode" in
    tls) export TLS_DIR="$work/certs"; client=("${client_tls[@]}") ;;
    auth) unset TLS_DIR; flags=(--bcrypt-cost 4); client=(--user=bench:benchpw) ;;
    *) unset TLS_DIR ;;
    esac
    rm -rf "$dir"
    scripts/local-cluster.sh start "$binary" "$dir" ${flags[@]+"${flags[@]}"}
    [ "$mode" = auth ] && enable_auth
    bench "$dir" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        "${client[@]+"${client[@]}"}" put --key-size=8 --sequential-keys --val-size=256 --total="$total"
    scripts/local-cluster.sh stop "$dir"
    unset TLS_DIR
    bench_figures "$server $mode" "$total"
    printf '%-6s %-10s %-6s %12s %10s %12s\n' "$round" "$server" "$mode" "$QPS" "$P99" "$CPU"
}

printf 'put, 1000 clients, %s requests per run, 3 members on loopback, %s, %s cores\n' "$total" "$(date -u +%F)" "$(nproc)"
printf '%-6s %-10s %-6s %12s %10s %12s\n' round server mode requests/s "p99 (s)" "members us"
for round in $(seq 1 "$rounds"); do
    for mode in plain tls auth; do
        run etcd "$ETCD_BIN" "$mode"
        run kv-server "$KV_SERVER_BIN" "$mode"
    done
done
