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
