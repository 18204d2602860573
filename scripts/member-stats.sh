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
