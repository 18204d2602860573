#!/usr/bin/env bash
# How well loadgen agrees with etcd's own benchmark tool: both drive the
# same real etcd 3-member cluster on loopback with the same flags, turn
# about, ROUNDS times per row. For each row it prints the median
# Requests/sec of each tool, their ratio, and each tool's CPU time (user +
# system, of the tool's own process) per request, median over the rounds.
#   scripts/loadgen-accuracy.sh [TOTAL] [ROUNDS]   (default 20000 requests, 3 rounds)
# Rows: put with 1 client, 100 clients over 10 conns and 1000 clients over
# 100 conns (8-byte sequential keys, 256-byte values, to the leader), and
# linearizable and serializable ranges with 1000 clients over 100 conns.
# Needs etcd's tools (../shared/peers/build.sh, or ETCD_BIN and
# ETCD_BENCHMARK_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-20000}
rounds=${2:-3}
if [ -z "${ETCD_BIN:-}" ] || [ -z "${ETCD_BENCHMARK_BIN:-}" ]; then
    peers=$(bash ../shared/peers/build.sh | tail -n 1)
    ETCD_BIN=${ETCD_BIN:-$peers/etcd}
    ETCD_BENCHMARK_BIN=${ETCD_BENCHMARK_BIN:-$peers/etcd-benchmark}
fi
cargo build --release -p loadgen >&2
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/etcd" || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
scripts/local-cluster.sh start "$ETCD_BIN" "$work/etcd"
"$ETCD_BENCHMARK_BIN" --endpoints=$endpoints put --key-size=8 --val-size=256 --total=1 > /dev/null 2>&1

# One run of a tool: prints "requests/sec cpu-microseconds-per-request".
run() {  # tool args...
    local tool=$1; shift
    local start end report qps cpu me=$BASHPID
    start=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$me/stat")
    report=$("$tool" "$@" 2>/dev/null)
    end=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$me/stat")
    qps=$(echo "$report" | awk '/Requests\/sec:/ {print $2}')
    # Clock ticks (children's user + system) to microseconds per request.
    cpu=$(awk -v t=$((end - start)) -v hz="$(getconf CLK_TCK)" -v n="$total" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
    echo "$qps $cpu"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

row() {  # name global-flags -- command...
    local name=$1 flags=$2; shift 2
    : > "$work/etcd.qps"; : > "$work/etcd.cpu"; : > "$work/loadgen.qps"; : > "$work/loadgen.cpu"
    for _ in $(seq 1 "$rounds"); do
        # shellcheck disable=SC2086
        read -r qps cpu < <(run "$ETCD_BENCHMARK_BIN" --endpoints=$endpoints $flags "$@")
        echo "$qps" >> "$work/etcd.qps"; echo "$cpu" >> "$work/etcd.cpu"
        # shellcheck disable=SC2086
        read -r qps cpu < <(run target/release/loadgen --endpoints=$endpoints $flags "$@")
        echo "$qps" >> "$work/loadgen.qps"; echo "$cpu" >> "$work/loadgen.cpu"
    done
    local eq lq ec lc
    eq=$(median < "$work/etcd.qps"); lq=$(median < "$work/loadgen.qps")
    ec=$(median < "$work/etcd.cpu"); lc=$(median < "$work/loadgen.cpu")
    awk -v n="$name" -v eq="$eq" -v lq="$lq" -v ec="$ec" -v lc="$lc" \
        'BEGIN { printf "| %s | %.0f | %.0f | %.3f | %.1f | %.1f | %.2f |\n", n, eq, lq, lq / eq, ec, lc, lc / ec }'
}

echo "Same etcd v3.5.17 cluster, $total requests per run, median of $rounds rounds, $(date -u +%F), $(nproc) cores."
echo
echo "| row | etcd tool req/s | loadgen req/s | loadgen / etcd tool | etcd tool CPU µs/req | loadgen CPU µs/req | CPU ratio |"
echo "|---|---|---|---|---|---|---|"
put="put --key-size=8 --sequential-keys --val-size=256 --total=$total"
# shellcheck disable=SC2086
row "put, 1 client" "--target-leader --conns=1 --clients=1" $put
# shellcheck disable=SC2086
row "put, 100 clients / 10 conns" "--target-leader --conns=10 --clients=100" $put
# shellcheck disable=SC2086
row "put, 1000 clients / 100 conns" "--target-leader --conns=100 --clients=1000" $put
row "range l, 1000 clients / 100 conns" "--conns=100 --clients=1000" range foo --consistency=l --total="$total"
row "range s, 1000 clients / 100 conns" "--conns=100 --clients=1000" range foo --consistency=s --total="$total"
