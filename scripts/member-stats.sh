# Sourced by the benchmark scripts: CPU and memory of the members of a
# cluster started by local-cluster.sh (their pids are in DIR/pids).

# Clock ticks of user + system time the members in DIR/pids have used.
member_ticks() {  # dir
    local pid sum=0
    while read -r pid; do
        sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done < "$1/pids"
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

# After `bench`: sets QPS, P99 (seconds) and CPU (the members' µs per
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
    CPU=$(awk -v t="$MEMBERS" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
}

# Clock ticks of user + system time this shell's finished children used.
children_ticks() {
    awk '{print $16 + $17}' "/proc/$$/stat"
}

# Runs etcd's benchmark tool ($ETCD_BENCHMARK_BIN) against the cluster in
# DIR; sets REPORT, TOOL (its CPU ticks) and MEMBERS (the members' CPU
# ticks) for the run.
bench() {  # dir tool-args...
    local dir=$1 members_before tool_before
    shift
    members_before=$(member_ticks "$dir")
    tool_before=$(children_ticks)
    REPORT=$("$ETCD_BENCHMARK_BIN" "$@" 2>&1)
    TOOL=$(($(children_ticks) - tool_before))
    MEMBERS=$(($(member_ticks "$dir") - members_before))
}
