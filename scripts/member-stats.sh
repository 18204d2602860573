# Sourced by the benchmark scripts: CPU and memory of the members of a
# cluster started by local-cluster.sh (their pids are in DIR/pids).

# Clock ticks of user + system time one process has used.
pid_ticks() {  # pid
    awk '{print $14 + $15}' "/proc/$1/stat"
}

# Clock ticks of user + system time the members in DIR/pids have used.
member_ticks() {  # dir
    local pid sum=0
    while read -r pid; do
        sum=$((sum + $(pid_ticks "$pid")))
    done < "$1/pids"
    echo "$sum"
}

# Context switches, voluntary and not, summed over every thread of the
# members in DIR/pids (threads that already exited are not counted).
member_switches() {  # dir
    local pid sum=0
    while read -r pid; do
        sum=$((sum + $(cat /proc/"$pid"/task/*/status 2>/dev/null |
            awk '/^(nonvoluntary|voluntary)_ctxt_switches:/ { s += $2 } END { print s + 0 }')))
    done < "$1/pids"
    echo "$sum"
}

# kv-server's raft messages sent, summed over the members' /metrics on
# ENDPOINTS (host:port,...); 0 for a server without the metric (etcd).
raft_messages_sent() {  # endpoints
    local member sum=0 count
    for member in ${1//,/ }; do
        count=$(curl -fsS "http://$member/metrics" 2>/dev/null |
            awk '/^kv_server_peer_raft_messages_sent_total / { print $2 }')
        sum=$((sum + ${count:-0}))
    done
    echo "$sum"
}

# One process's resident set, in KiB.
rss_kb() {  # pid
    ps -o rss= -p "$1" | tr -d ' '
}

# The largest resident set among the members in DIR/pids, in KiB.
max_rss_kb() {  # dir
    local pid max=0 rss
    while read -r pid; do
        rss=$(rss_kb "$pid")
        [ "${rss:-0}" -gt "$max" ] && max=$rss
    done < "$1/pids"
    echo "$max"
}

# After `bench`: sets QPS, AVG and P99 (seconds) and CPU (the members' µs per
# request) of the run ($REPORT, $MEMBERS) of REQUESTS requests; stops the
# script, printing the report, if the benchmark saw any error. Call it
# directly, not in a subshell, so that the stop stops the script.
bench_figures() {  # label requests
    if echo "$REPORT" | grep -q "Error distribution"; then
        echo "$1: the benchmark saw errors:" >&2
        echo "$REPORT" >&2
        exit 1
    fi
    QPS=$(echo "$REPORT" | awk '/Requests\/sec:/ {print $2}')
    P99=$(echo "$REPORT" | awk '/ 99% in/ {print $3}')
    AVG=$(echo "$REPORT" | awk '/Average:/ {print $2}')
    CPU=$(awk -v t="$MEMBERS" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
}

# Clock ticks of user + system time this shell's finished children used.
children_ticks() {
    awk '{print $16 + $17}' "/proc/$$/stat"
}

# Runs etcd's benchmark tool ($ETCD_BENCHMARK_BIN, or $BENCH_BIN when set:
# loadgen takes the same flags) against the cluster in DIR; sets REPORT,
# TOOL (its CPU ticks), MEMBERS (the members' CPU ticks) and SWITCHES (the
# members' context switches) for the run. With TOOL_CPUS set (a taskset
# CPU list) the tool runs bound to those CPUs.
bench() {  # dir tool-args...
    local dir=$1 members_before tool_before switches_before pin=()
    shift
    [ -z "${TOOL_CPUS:-}" ] || pin=(taskset -c "$TOOL_CPUS")
    members_before=$(member_ticks "$dir")
    switches_before=$(member_switches "$dir")
    tool_before=$(children_ticks)
    REPORT=$(${pin[@]+"${pin[@]}"} "${BENCH_BIN:-$ETCD_BENCHMARK_BIN}" "$@" 2>&1)
    TOOL=$(($(children_ticks) - tool_before))
    MEMBERS=$(($(member_ticks "$dir") - members_before))
    SWITCHES=$(($(member_switches "$dir") - switches_before))
}
