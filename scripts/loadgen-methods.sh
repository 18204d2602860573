#!/usr/bin/env bash
# The seeds' benchmark methods in loadgen, checked against a real etcd
# 3.5.17 cluster and a kv-server cluster (3 members each, on loopback),
# small, for CI:
#   iterations  put with --warmup 1 --iterations 3: three runs, their
#               mean line, and JSON holding all four runs;
#   sweep       2 value sizes x 2 client counts x 2 connection counts,
#               with every member's /metrics scraped around each row:
#               every row has a WAL fsync p99, the JSON has every field,
#               and the chart has a panel per connection count and
#               measure, each with a line per value size;
#   v2.2.0-rc   etcd's v2.2.0-rc matrix over v3 at 2% of its requests:
#               20 rows, no errors;
#   watch       etcd's tool's watch (10 streams of 20 watchers, 50 puts):
#               both summaries, every one of the 10,000 events received
#               (loadgen fails the run otherwise);
#   watch-latency  5 watchers, 50 puts at 100/s: its report.
# Fails on the first check that does not hold.
#   scripts/loadgen-methods.sh
# KV_SERVER_BIN and LOADGEN_BIN pick builds (default: release builds made
# here); etcd comes from ETCD_BIN or tools/etcd-peers/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# etcd_tools, our_binaries
source scripts/bench-tools.sh
etcd_tools ETCD_BIN
our_binaries kv-server loadgen
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/run" || true; rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
# One URL in each form loadgen takes: a full URL, scheme and port, host:port.
metrics=http://127.0.0.1:2379/metrics,http://127.0.0.1:22379,127.0.0.1:32379

fail() {
    echo "loadgen-methods: $*" >&2
    exit 1
}

check() {  # server binary
    local server=$1 dir="$work/run" out="$work/$1"
    mkdir -p "$out"
    scripts/local-cluster.sh start "$2" "$dir"

    "$LOADGEN_BIN" --endpoints "$endpoints" --conns 10 --clients 50 put --total 500 \
        --warmup 1 --iterations 3 --json "$out/iterations.json" > "$out/iterations.txt"
    grep -q "^warmup 1/1: " "$out/iterations.txt" || fail "$server: no warm-up line"
    [ "$(grep -c "^iteration [123]/3: .*, 0 errors$" "$out/iterations.txt")" = 3 ] ||
        fail "$server: not three clean iterations: $(cat "$out/iterations.txt")"
    grep -Eq "^mean of 3 iterations: [0-9.]+ req/s \(stdev [0-9.]+\), p99 [0-9.]+ ms$" "$out/iterations.txt" ||
        fail "$server: no mean line"
    [ "$(grep -c '"p99_secs"' "$out/iterations.json")" = 4 ] || fail "$server: the JSON does not hold four runs"

    "$LOADGEN_BIN" sweep --endpoints "$endpoints" --val-sizes 256,1024 --clients 10,50 --conns 2,5 \
        --total 300 --metrics-urls "$metrics" --json "$out/sweep.json" --svg "$out/sweep.svg" > "$out/sweep.txt"
    [ "$(grep -c '"wal_fsync_p99_ms": [0-9]' "$out/sweep.json")" = 8 ] ||
        fail "$server: not eight sweep rows with a WAL fsync p99: $(cat "$out/sweep.txt")"
    for field in qps p99_ms backend_commit_p99_ms peer_rtt_p99_ms; do
        [ "$(grep -c "\"$field\":" "$out/sweep.json")" = 8 ] || fail "$server: sweep rows lack $field"
    done
    if grep -Eq " [1-9][0-9]* errors;" "$out/sweep.txt"; then fail "$server: sweep rows had errors"; fi
    grep -q "<svg" "$out/sweep.svg" || fail "$server: no sweep chart"
    # A column of panels per connection count, a line per value size in
    # each: every panel's legend names both value sizes (the SVG puts
    # each text on a line of its own).
    for text in "requests/s, 2 conns" "requests/s, 5 conns" "p99 latency (ms), 2 conns" \
        "p99 latency (ms), 5 conns"; do
        grep -qxF "$text" "$out/sweep.svg" || fail "$server: the sweep chart has no panel \"$text\""
    done
    for size in 256 1024; do
        [ "$(grep -cxF "$size B values" "$out/sweep.svg")" = 4 ] ||
            fail "$server: the sweep chart has no $size B line in each of its four panels"
    done

    "$LOADGEN_BIN" matrix --doc v2.2.0-rc --scale 0.02 --endpoints "$endpoints" --label "$server" \
        > "$out/v2.txt"
    # Each row: op, size, clients, target, a measured QPS and the page's,
    # a measured p90 and the page's, and no errors.
    row_re='^\| (read|write) \| (64|256) \| [0-9]+ \| (leader|all) \| [1-9][0-9]* \| [1-9][0-9]* \| [0-9]+\.[0-9] \| [0-9]+\.[0-9] \| 0 \|$'
    [ "$(grep -Ec "$row_re" "$out/v2.txt")" = 20 ] ||
        fail "$server: the v2.2.0-rc matrix did not finish 20 clean rows: $(tail -25 "$out/v2.txt")"

    "$LOADGEN_BIN" --endpoints "$endpoints" --conns 5 --clients 5 watch --streams 10 --watch-per-stream 20 \
        --put-total 50 > "$out/watch.txt"
    # loadgen fails the run unless every watcher gets every event.
    grep -q "^Watch creation summary:" "$out/watch.txt" || fail "$server: no watch creation summary"
    sed -n '/^Watch events received summary:/,$p' "$out/watch.txt" | grep -q "Requests/sec:" ||
        fail "$server: no events summary: $(cat "$out/watch.txt")"
    "$LOADGEN_BIN" --endpoints "$endpoints" --conns 5 --clients 5 watch-latency --total 50 --put-rate 100 \
        > "$out/watch-latency.txt"
    grep -q "Requests/sec:" "$out/watch-latency.txt" || fail "$server: no watch-latency report"

    scripts/local-cluster.sh stop "$dir"
    rm -rf "$dir"
    echo "loadgen-methods: $server: iterations, sweep, the v2.2.0-rc matrix and the watch benchmarks hold"
}

check etcd "$ETCD_BIN"
check kv-server "$KV_SERVER_BIN"
