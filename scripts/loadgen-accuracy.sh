#!/usr/bin/env bash
# How well loadgen agrees with etcd's own benchmark tool: both drive the
# same real etcd 3-member cluster on loopback with the same flags, after
# one untimed run of each, taking turns ROUNDS times per row with the
# first place alternating. For each row it prints the median
# Requests/sec of each tool, their ratio, each tool's CPU time (user +
# system, of the tool's own process) per request, and how busy that kept
# the CPUs the tool runs on; medians over the rounds.
#   scripts/loadgen-accuracy.sh [TOTAL] [ROUNDS] [SERVER_CPU]
#     TOTAL: requests per run (default 20000; single-client rows run TOTAL / 10)
#     ROUNDS: runs of each tool per row (default 3)
#     SERVER_CPU: the share of CPU 0 the three members may use, e.g. 0.5
#                 (default 1: all of it, no quota)
#   ROWS=PATTERN in the environment runs only the rows whose name matches
#   that extended regular expression, e.g. ROWS='range s'.
# Rows: etcd's watch benchmarks last (events per second received by 1000
# watchers; watch latency's median in ms), and put with 1 client, 100 clients over 10 conns and 1000 clients over
# 100 conns (8-byte sequential keys, 256-byte values, to the leader), and
# linearizable and serializable ranges with 1 client, 100 clients over 10
# conns, and 1000 clients over 100 conns (etcd's documented matrix has the
# first and the last).
# On a small machine the tool and the three members share the CPU, so a
# tool that spends less per request leaves more to the servers and
# measures them faster: that compares the tools' costs, not their
# measurements. So the members run on CPU 0 and the tool on the others
# (taskset), and each tool measures what the servers can do.
# Where a tool keeps its own CPU nearly busy, it measures its own limit,
# not the servers'. SERVER_CPU below 1 puts the members in a cgroup with a
# CPU quota (10 ms period, so a throttled member waits at most a few ms,
# far below raft's 100 ms heartbeat), which makes the servers the limit
# for both tools: that row then compares what each tool measures of the
# same servers. Quotas need root and the cgroup cpu controller (v1 or v2).
# The watch-latency row always runs without the quota: its puts come at a
# fixed 100/s, so the servers are never its limit, and a quota would only
# add its throttled stretches (up to 10 ms) to a latency of tens of µs.
# It runs the tool's defaults (one watcher on one connection; the puts
# over the next connection, to the next endpoint), with the endpoints
# ordered follower, leader, follower: the watcher is on a follower and the
# puts go to the leader, so what is timed is the commit's way from the
# leader to a follower and its apply there. Placed otherwise, the event
# mostly reaches the watcher before the put's answer reaches the putter,
# and the tools would compare their own few µs of event handling.
# During that row the CPUs poll when idle instead of halting (the row
# holds /dev/cpu_dma_latency at 0, as latency benchmarks do; it needs
# root). Otherwise each figure also carries the time a halted vCPU takes
# to wake for the event, which differs between the tools: it depends on
# how the tool's runtime spins or sleeps between messages (the guest's
# haltpoll driver adapts its polling to that), and it made loadgen's
# median read 4-16% above the tool's in nine runs of nine.
# The row's median of about 70 µs moves by up to 20% from one run of ten
# seconds to the next, so it takes the median of at least 15 rounds.
# Needs etcd's tools (tools/etcd-peers/build.sh, or ETCD_BIN and
# ETCD_BENCHMARK_BIN), and at least 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-20000}
rounds=${2:-3}
server_cpu=${3:-1}
# etcd_tools, follower_leader_follower
source scripts/bench-tools.sh
etcd_tools ETCD_BIN ETCD_BENCHMARK_BIN
cargo build --release -p loadgen >&2
work=$(mktemp -d)
cgroup=""
cleanup() {
    scripts/local-cluster.sh stop "$work/etcd" || true
    # A cgroup can be removed once its last member has fully exited.
    if [ -n "$cgroup" ]; then
        for _ in $(seq 1 50); do rmdir "$cgroup" 2>/dev/null && break; sleep 0.1; done
    fi
    rm -rf "$work"
}
trap cleanup EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
last_cpu=$(($(nproc) - 1))
[ "$last_cpu" -ge 1 ] || { echo "loadgen-accuracy: needs at least 2 CPUs" >&2; exit 1; }
# The quota's period, in microseconds: short, so that a throttled member
# is held back for milliseconds at a time, not for a tenth of a second.
quota_period_us=10000
if awk -v c="$server_cpu" 'BEGIN { exit !(c < 1) }'; then
    quota_us=$(awk -v c="$server_cpu" -v p=$quota_period_us 'BEGIN { printf "%d", c * p }')
    if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        cgroup=/sys/fs/cgroup/loadgen-accuracy-$$
        mkdir "$cgroup"
        echo "$quota_us $quota_period_us" > "$cgroup/cpu.max"
    elif [ -d /sys/fs/cgroup/cpu ]; then
        cgroup=/sys/fs/cgroup/cpu/loadgen-accuracy-$$
        mkdir "$cgroup"
        echo $quota_period_us > "$cgroup/cpu.cfs_period_us"
        echo "$quota_us" > "$cgroup/cpu.cfs_quota_us"
    else
        echo "loadgen-accuracy: no cgroup cpu controller for SERVER_CPU=$server_cpu" >&2; exit 1
    fi
    # The members inherit the cgroup of the shell that starts them.
    (echo "$BASHPID" > "$cgroup/cgroup.procs" && taskset -c 0 scripts/local-cluster.sh start "$ETCD_BIN" "$work/etcd")
else
    taskset -c 0 scripts/local-cluster.sh start "$ETCD_BIN" "$work/etcd"
fi
"$ETCD_BENCHMARK_BIN" --endpoints=$endpoints put --key-size=8 --val-size=256 --total=1 > /dev/null 2>&1

# One run of a tool: prints "figure cpu-microseconds-per-request". The
# figure is the report's last Requests/sec (watch prints two summaries:
# the events received come last), or with METRIC=p50 its median latency
# in ms (watch-latency, whose rate is the put rate).
run() {  # requests tool args...
    local n=$1 tool=$2; shift 2
    local start end report figure cpu me=$BASHPID
    start=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$me/stat")
    report=$(taskset -c "1-$last_cpu" "$tool" "$@" 2>/dev/null)
    end=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$me/stat")
    if [ "${METRIC:-qps}" = p50 ]; then
        figure=$(echo "$report" | awk '/^ *50% in/ {v = $3 * 1000} END {print v}')
    else
        figure=$(echo "$report" | awk '/Requests\/sec:/ {v = $2} END {print v}')
    fi
    # Clock ticks (children's user + system) to microseconds per request.
    cpu=$(awk -v t=$((end - start)) -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
    echo "$figure $cpu"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

row() {  # name requests global-flags command...
    total_row "$@" --total="$2"
}

# A row whose command takes no --total (watch): ARGS as given.
total_row() {  # name requests global-flags command...
    local name=$1 n=$2 flags=$3; shift 3
    [[ -z "${ROWS:-}" || "$name" =~ $ROWS ]] || return 0
    : > "$work/etcd.qps"; : > "$work/etcd.cpu"; : > "$work/loadgen.qps"; : > "$work/loadgen.cpu"
    # The cluster speeds up over its first runs of a workload (the
    # members' heaps and watcher tables grow to it), so one untimed run of
    # each tool warms it, and the tools take turns going first: a tool
    # that always ran second would always meet a warmer cluster.
    # shellcheck disable=SC2086
    run "$n" "$ETCD_BENCHMARK_BIN" --endpoints=$endpoints $flags "$@" > /dev/null
    # shellcheck disable=SC2086
    run "$n" target/release/loadgen --endpoints=$endpoints $flags "$@" > /dev/null
    local round tool
    for round in $(seq 1 "$rounds"); do
        for tool in etcd loadgen; do
            if [ $((round % 2)) = 0 ]; then tool=$([ "$tool" = etcd ] && echo loadgen || echo etcd); fi
            local bin=target/release/loadgen
            [ "$tool" = etcd ] && bin=$ETCD_BENCHMARK_BIN
            # shellcheck disable=SC2086
            read -r qps cpu < <(run "$n" "$bin" --endpoints=$endpoints $flags "$@")
            echo "$qps" >> "$work/$tool.qps"; echo "$cpu" >> "$work/$tool.cpu"
        done
    done
    local eq lq ec lc
    eq=$(median < "$work/etcd.qps"); lq=$(median < "$work/loadgen.qps")
    ec=$(median < "$work/etcd.cpu"); lc=$(median < "$work/loadgen.cpu")
    # A latency row's figures are not rates, so it shows no CPU busy.
    awk -v n="$name" -v eq="$eq" -v lq="$lq" -v ec="$ec" -v lc="$lc" -v cpus="$last_cpu" -v m="${METRIC:-qps}" \
        'BEGIN { if (m == "p50") { eb = "—"; lb = "—" }
                 else { eb = sprintf("%.0f%%", eq * ec / 1e4 / cpus); lb = sprintf("%.0f%%", lq * lc / 1e4 / cpus) }
                 printf "| %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.2f | %s | %s |\n",
                 n, eq, lq, lq / eq, ec, lc, lc / ec, eb, lb }'
}

echo "Same etcd v3.5.17 cluster (members on $server_cpu of CPU 0, the tool on CPUs 1-$last_cpu), $total requests per run,"
echo "median of $rounds rounds, $(date -u +%F), $(nproc) cores."
echo
echo "| row | etcd tool req/s | loadgen req/s | loadgen / etcd tool | etcd tool CPU µs/req | loadgen CPU µs/req | CPU ratio | etcd tool CPU busy | loadgen CPU busy |"
echo "|---|---|---|---|---|---|---|---|---|"
single=$((total / 10))
put="put --key-size=8 --sequential-keys --val-size=256"
# shellcheck disable=SC2086
row "put, 1 client" "$single" "--target-leader --conns=1 --clients=1" $put
# shellcheck disable=SC2086
row "put, 100 clients / 10 conns" "$total" "--target-leader --conns=10 --clients=100" $put
# shellcheck disable=SC2086
row "put, 1000 clients / 100 conns" "$total" "--target-leader --conns=100 --clients=1000" $put
row "range l, 1 client" "$single" "--conns=1 --clients=1" range foo --consistency=l
row "range s, 1 client" "$single" "--conns=1 --clients=1" range foo --consistency=s
row "range l, 100 clients / 10 conns" "$total" "--conns=10 --clients=100" range foo --consistency=l
row "range s, 100 clients / 10 conns" "$total" "--conns=10 --clients=100" range foo --consistency=s
row "range l, 1000 clients / 100 conns" "$total" "--conns=100 --clients=1000" range foo --consistency=l
row "range s, 1000 clients / 100 conns" "$total" "--conns=100 --clients=1000" range foo --consistency=s
# etcd's watch benchmarks: events received per second (1000 per put), and
# watch latency's median in ms, from the put's answer to the watcher's
# event (its rate is the put rate, the same for both tools; --precise, as
# four decimals of a second are 0.1 ms, near what loopback takes). The
# latency row's CPU column is per put.
watch_puts=$((total / 100))
total_row "watch, 10 streams x 100 watchers (events/s)" "$((watch_puts * 1000))" "--conns=10 --clients=10" \
    watch --streams=10 --watch-per-stream=100 --watched-key-total=1 --put-total="$watch_puts"
# The members keep their cgroup, without a limit (see the header).
if [ -n "$cgroup" ]; then
    if [ -f "$cgroup/cpu.max" ]; then echo "max $quota_period_us" > "$cgroup/cpu.max"; else echo -1 > "$cgroup/cpu.cfs_quota_us"; fi
fi
# Follower, leader, follower (see the header).
latency_endpoints=$(follower_leader_follower "$endpoints")
if [ -w /dev/cpu_dma_latency ]; then
    exec {no_halt}> /dev/cpu_dma_latency
    printf '\0\0\0\0' >&"$no_halt"
else
    echo "loadgen-accuracy: cannot hold /dev/cpu_dma_latency (not root?): idle CPUs may halt in the latency row" >&2
fi
METRIC=p50 rounds=$((rounds > 15 ? rounds : 15)) endpoints=$latency_endpoints \
    total_row "watch-latency, watcher on a follower, puts to the leader (median ms, no quota, idle CPUs poll)" "$watch_puts" \
    "--conns=1 --clients=1 --precise" watch-latency --total="$watch_puts" --put-rate=100
