#!/usr/bin/env bash
# This project against a real etcd, side by side in one run: etcd's
# documented put/range matrix (loadgen matrix) against a real etcd 3-member
# cluster, then against this project's 3-member cluster, both on loopback
# with the same flags, one after the other.
#   scripts/compare.sh [SCALE] [OUT_DIR]
#     SCALE    multiplies each row's documented total (default 1: 10,000 or
#              100,000 requests per row); CI runs 0.01.
#     OUT_DIR  where the results go (default target/compare):
#              etcd.json, kv-server.json  every figure of each run
#              compare.md                 the table printed at the end
#              compare.svg                throughput and p99 per row
# etcd comes from $ETCD_BIN, else from etcd's cache that
# tools/etcd-peers/build.sh fills (built now if Go is here), else Debian's
# etcd-server (apt-get).
# Records each server's largest member RSS after every row. Builds
# kv-server and loadgen in release, unless KV_SERVER_BIN and LOADGEN_BIN
# name builds to use (the test command passes its own).
# With --iterations M (and --warmup N, default 0), Arm's Graviton method
# follows the matrix on each cluster: put (1000 clients over 100
# connections, 256-byte values, SCALE x 100,000 requests per run) N times
# unreported, then M times measured, written to the leader and then to
# all members; each mean line (rate, its stdev, p99) goes to compare.md.
#   scripts/compare.sh [SCALE] [OUT_DIR] [--iterations M] [--warmup N]
set -euo pipefail
cd "$(dirname "$0")/.."
positional=()
iterations=0
warmup=0
while [ $# -gt 0 ]; do
    case "$1" in
    --iterations) iterations=${2:?--iterations takes a count}; shift 2 ;;
    --warmup) warmup=${2:?--warmup takes a count}; shift 2 ;;
    *) positional+=("$1"); shift ;;
    esac
done
scale=${positional[0]:-1}
out=${positional[1]:-target/compare}
mkdir -p "$out"

if [ -z "${ETCD_BIN:-}" ]; then
    if [ -x "$HOME/.cache/etcd-peers/etcd" ]; then
        ETCD_BIN=$HOME/.cache/etcd-peers/etcd
    elif command -v go > /dev/null && peers=$(scripts/etcd-peers.sh); then
        ETCD_BIN=$peers/etcd
    else
        if ! command -v etcd > /dev/null; then
            sudo=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
            $sudo apt-get update -q > /dev/null
            DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q etcd-server > /dev/null
        fi
        ETCD_BIN=$(command -v etcd)
    fi
fi
echo "etcd: $ETCD_BIN ($("$ETCD_BIN" --version | head -n 1))" >&2
if [ -z "${KV_SERVER_BIN:-}" ] || [ -z "${LOADGEN_BIN:-}" ]; then
    # Apart: built together, kv-server would take loadgen's features of
    # their shared dependencies, and not be the binary users build.
    cargo build --release -p kv-server >&2
    cargo build --release -p loadgen >&2
fi
kv_server=${KV_SERVER_BIN:-target/release/kv-server}
loadgen=${LOADGEN_BIN:-target/release/loadgen}

work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/etcd" || true; scripts/local-cluster.sh stop "$work/kv-server" || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379

measure() {  # label binary
    local label=$1 binary=$2 dir="$work/$1"
    scripts/local-cluster.sh start "$binary" "$dir"
    "$loadgen" matrix --endpoints "$endpoints" --scale "$scale" \
        --rss-pids "$(paste -sd, "$dir/pids")" --label "$label" --json "$out/$label.json" > "$out/$label.log"
    if [ "$iterations" -gt 0 ]; then
        local puts target flag
        puts=$(awk -v s="$scale" 'BEGIN { n = int(s * 100000); print (n < 1000 ? 1000 : n) }')
        for target in leader all; do
            flag=$([ "$target" = leader ] && echo "--target-leader" || echo "")
            # shellcheck disable=SC2086
            "$loadgen" --endpoints "$endpoints" --conns 100 --clients 1000 $flag put --key-size 8 \
                --sequential-keys --val-size 256 --total "$puts" --warmup "$warmup" --iterations "$iterations" \
                --json "$out/$label-iterations-$target.json" > "$out/$label-iterations-$target.log"
            echo "| $label | $target | $(grep '^mean of' "$out/$label-iterations-$target.log") |" >> "$out/iterations.md"
        done
    fi
    scripts/local-cluster.sh stop "$dir"
}

rm -f "$out/iterations.md"
measure etcd "$ETCD_BIN"
measure kv-server "$kv_server"
{
    echo "etcd's documented matrix at scale $scale, 3 members on loopback, $(date -u +%F),"
    echo "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -m)."
    echo
    "$loadgen" compare "$out/etcd.json" "$out/kv-server.json" --svg "$out/compare.svg"
    if [ -f "$out/iterations.md" ]; then
        echo
        echo "put, 1000 clients, $warmup warm-up and $iterations measured runs each:"
        echo
        echo "| server | written to | mean |"
        echo "|---|---|---|"
        cat "$out/iterations.md"
    fi
} > "$out/compare.md"
cat "$out/compare.md"
echo "chart: $out/compare.svg" >&2
