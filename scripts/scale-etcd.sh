#!/usr/bin/env bash
# Scale rows, side by side: etcd 3.5.17, etcd 3.7.3 and kv-server, each a
# 3-member cluster on loopback, filled with KEYS distinct keys of 256-byte
# values by etcd's benchmark tool (1000 clients, 100 connections, to the
# leader). Reads go to one follower through etcd's Go client v3.7.3
# (tests/go/ranges, built here with go), serializable, over every key.
# Per server it prints:
#   fill      the fill's requests/s and the members' CPU per put
#   rss       the largest member RSS before and after the fill, and the
#             growth per key (after - before, over KEYS)
#   range     the first 100,000 keys, 3 times: each time, and the
#             follower's peak RSS growth (VmHWM, reset before each read,
#             over its RSS before)
#   list      every key in pages of 500, each after the last key of the
#             one before, at the first page's revision (as kube-apiserver
#             lists), count and more checked on every page: the time
#   count     a count-only range of every key, first of the reads; keys:
#             a keys-only one; recount: the count-only range again, after
#             the list and the keys-only range (as kube-apiserver counts
#             each collection every minute)
#   stream    RangeStream of every key (chunks dropped as they come): the
#             time and the follower's peak RSS growth
#   whole     every key and value in one Range: at 10M keys over gRPC's
#             send limit, so the time until the refusal, its code and
#             message, and the follower's peak RSS growth
#   cancel    a RangeStream of every key cancelled after 100,000 keys,
#             then a count-only range: both times, the peak growth, and
#             the follower's CPU over the two seconds after
#   future    a compaction at the current revision + 1000: etcd's error
#             and how long it took
#   restart   kill -9 of that follower, then the time from its start until
#             it answers a serializable get (its port polled every 20 ms,
#             then etcdctl)
#   rewrite   every key put again with 1 KiB values (so the store holds
#             over 1 GB at 1M keys, and every first value is garbage);
#             SCALE_REWRITE_BYTES sets the size (at 10M keys, 256 keeps
#             the store under the 8 GiB quota every server is given)
#   quiet     3 loads of KEYS/2 puts (SCALE_LOAD_PUTS) of 256 bytes at
#             1000 clients to the leader, over the fill's keys: the
#             loads' median p99 (and the worst), the longest
#             put, failed puts, leader changes and the loads' time
#   compact   the same load, with a compaction at the rewrite's revision
#             (every revision of the first fill) 1 s into it, waiting for
#             its physical end (--physical): the same figures, and how
#             long the compaction took. While the compaction runs, loads
#             follow back to back
#   settled   3 quiet loads again, after the compaction: each load adds
#             KEYS/2 revisions and lengthens the histories, so later loads
#             run on a larger store; the compaction's loads are judged
#             against the quiet loads on each side of them, and the
#             defrag's against these
#   recompact a compaction at the current revision, unloaded, waited for
#             (--physical): its time. It leaves the defrag garbage that
#             compaction alone does not give back: kv-server's value
#             files between half and nine tenths live (the second-to-last
#             load's, about 60 % live), bbolt's freed pages in etcd's file
#   defrag    the same loads, with `etcdctl defrag` of the leader 1 s into
#             it: the same figures, the defrag's time and dbSize (and
#             dbSizeInUse) before and after
#   idle      the leader defragmented again once the loads are over: its
#             time, dbSize before and after
#   scripts/scale-etcd.sh [KEYS]     (default 1000000)
# SCALE_SERVERS picks the servers and their order (default "etcd etcd-3.7
# kv-server"); SCALE_ROWS=reads stops after the restart, and
# SCALE_ROWS=maintenance skips from the range to the restart (default
# all rows). SCALE_READS picks the reads among "range count list keys
# stream whole cancel future recount" (default all; the list takes etcd minutes at 1M keys).
# SCALE_LIST_SECONDS stops a list that takes longer after the page that
# passes it, and the row says how far it got (default: no limit; etcd's
# list grows with the square of the keys, hours at 10M).
# SCALE_LOAD_PUTS sets the puts per load (default KEYS/2; at 10M keys
# a load of 500,000 puts is the 1M-key table's load, so the two sizes
# compare at the same load).
# Each server starts on a machine left as the first found it: the
# server before it is stopped, its data removed (unless SCALE_KEEP) and
# the page cache dropped where allowed. At 10M keys etcd's three data
# directories fill most of the page cache: kv-server's 10M fill ran at
# 13,384 puts/s right after etcd 3.7.3's part of a run and at 21,380 on
# its own (2026-11-27), so the order of the servers was in the figures.
# SCALE_QUOTA_BYTES sets every member's --quota-backend-bytes (default
# 8 GiB, etcd's documented limit). At 10M keys with the rewrite, the
# loads during a compaction outgrow 8 GiB before a compaction of 10M
# revisions, paced under load, gives space back: NOSPACE stopped the
# loads of 2026-11-27 after 9.5 minutes of it.
# Needs etcd's tools (scripts/etcd-peers.sh) and go; builds
# kv-server.
set -euo pipefail
cd "$(dirname "$0")/.."
keys=${1:-1000000}
load_puts=${SCALE_LOAD_PUTS:-$((keys / 2))}
rewrite_bytes=${SCALE_REWRITE_BYTES:-1024}
quota=--quota-backend-bytes=${SCALE_QUOTA_BYTES:-8589934592}
# etcd_tools, our_binaries
source scripts/bench-tools.sh
etcd_tools ETCD_BIN ETCD_BENCHMARK_BIN ETCDCTL_BIN ETCD37_BIN
our_binaries kv-server
ticks=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'for s in etcd etcd-3.7 kv-server; do scripts/local-cluster.sh stop "$work/$s" || true; done; [ -n "${SCALE_KEEP:-}" ] || rm -rf "$work"' EXIT
ranges="$work/ranges"
(cd crates/kv-server/tests/go/ranges && GOFLAGS=-mod=mod go build -o "$ranges" .)
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
# Bounds on the waits below, in 20 ms polls: a minute.
POLLS_MAX=3000
# The bound on a restarted follower's wait to serve, in seconds: etcd
# 3.7.3 at ten million keys was still not serving after the minute of
# POLLS_MAX on a slow machine, and took 104 s on a faster one; fifteen
# minutes gives every server's figure while still ending a hung member.
RESTART_SECONDS_MAX=900

# member_ticks, pid_ticks, rss_kb, max_rss_kb
source scripts/member-stats.sh

# A member that is not the leader: 2, unless 2 leads, then 3.
follower() {
    if "$ETCDCTL_BIN" --endpoints=127.0.0.1:22379 endpoint status -w simple | awk -F', ' '{print $5}' | grep -q true; then
        echo 3
    else
        echo 2
    fi
}

# One timed read by tests/go/ranges on the follower, with its peak RSS
# growth: the kernel's high-water mark is reset first (clear_refs 5).
read_row() {  # name row pid port mode
    local before report
    echo 5 > "/proc/$3/clear_refs" 2> /dev/null || true
    before=$(awk '/^VmRSS:/ {print $2}' "/proc/$3/status")
    # etcd 3.5 has no RangeStream: the row says why it failed.
    report=$(RANGES_LIST_SECONDS=${SCALE_LIST_SECONDS:-0} "$ranges" time "127.0.0.1:$4" "$5" 2>&1) ||
        report="failed: ${report##*: }"
    printf '%-10s %-9s %s, follower +%d MB peak\n' "$1" "$2" "$report" \
        $((($(awk '/^VmHWM:/ {print $2}' "/proc/$3/status") - before) / 1024))
}

measure() {  # name binary
    local name=$1 binary=$2 dir="$work/$1" before after started ticks_before report
    # Room for the rewrite's 1 KiB values beside the first fill's.
    scripts/local-cluster.sh start "$binary" "$dir" "$quota"
    before=$(max_rss_kb "$dir")
    ticks_before=$(member_ticks "$dir")
    started=$(date +%s.%N)
    report=$("$ETCD_BENCHMARK_BIN" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --key-space-size="$keys" --val-size=256 --total="$keys" 2>&1)
    printf '%-10s fill      %s puts/s, %s us of member CPU per put, %.0f s\n' "$name" \
        "$(echo "$report" | awk '/Requests\/sec:/ {printf "%.0f", $2}')" \
        "$(awk -v t=$(($(member_ticks "$dir") - ticks_before)) -v n="$keys" -v hz="$ticks" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')" \
        "$(echo "$(date +%s.%N) - $started" | bc)"
    after=$(max_rss_kb "$dir")
    printf '%-10s rss       %d MB before, %d MB after, %.0f bytes per key\n' "$name" \
        $((before / 1024)) $((after / 1024)) "$(echo "($after - $before) * 1024 / $keys" | bc -l)"
    if [ "${SCALE_ROWS:-all}" != maintenance ]; then
        read_rows "$name" "$binary" "$dir"
    fi
    if [ "${SCALE_ROWS:-all}" != reads ]; then
        maintenance_rows "$name" "$dir"
    fi
    scripts/local-cluster.sh stop "$dir"
    [ -n "${SCALE_KEEP:-}" ] || rm -rf "$dir"
    sync
    echo 3 2> /dev/null > /proc/sys/vm/drop_caches || true
}

# The reads from a follower, then its restart.
read_rows() {  # name binary dir
    local name=$1 binary=$2 dir=$3 member port pid started
    member=$(follower)
    port=$([ "$member" = 2 ] && echo 22379 || echo 32379)
    pid=$(sed -n "${member}p" "$dir/pids")
    local reads=" ${SCALE_READS:-range count list keys stream whole cancel future recount} "
    if [[ $reads == *" range "* ]]; then
        for round in 1 2 3; do
            read_row "$name" range "$pid" "$port" range100k
        done
    fi
    for mode in count list keys stream whole; do
        [[ $reads == *" $mode "* ]] && read_row "$name" "$mode" "$pid" "$port" "$mode"
    done
    [[ $reads == *" cancel "* ]] && cancel_row "$name" "$pid" "$port"
    [[ $reads == *" future "* ]] && future_row "$name" "$port"
    [[ $reads == *" recount "* ]] && read_row "$name" recount "$pid" "$port" count
    scripts/local-cluster.sh restart "$binary" "$dir" "$member" "$quota"
    started=$(date +%s.%N)
    local served=no deadline
    deadline=$(($(date +%s) + RESTART_SECONDS_MAX))
    # Each poll takes at least its 20 ms sleep, so this count bounds the
    # loop even if the clock stalls; the deadline ends it in time.
    for _ in $(seq 1 $((RESTART_SECONDS_MAX * 50))); do
        [ "$(date +%s)" -lt "$deadline" ] || break
        # etcdctl waits out its whole dial timeout on a closed port, so
        # it is asked only once the port takes connections.
        if (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null &&
            "$ETCDCTL_BIN" --endpoints="127.0.0.1:$port" --dial-timeout=1s --command-timeout=1s \
                get probe --consistency=s > /dev/null 2>&1; then
            served=yes
            break
        fi
        sleep 0.02
    done
    printf '%-10s restart   serving after %.2f s (%s)\n' "$name" "$(echo "$(date +%s.%N) - $started" | bc)" "$served"
    [ "$served" = yes ] || restart_state "$name" "$dir" "$member"
}

# Why a restarted follower is not serving when the wait ends: whether it
# is alive, its RSS and CPU so far, the machine's available memory, and
# the last lines of its log (which goes with the work directory).
restart_state() {  # name dir member
    local pid
    pid=$(sed -n "${3}p" "$2/pids")
    if [ -e "/proc/$pid/status" ]; then
        printf '%-10s restart   pid %s alive: RSS %d MB, %d s of CPU; MemAvailable %d MB\n' "$1" "$pid" \
            $(($(rss_kb "$pid") / 1024)) $(($(pid_ticks "$pid") / ticks)) \
            $(($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 1024))
    else
        printf '%-10s restart   pid %s gone\n' "$1" "$pid"
    fi
    tail -n 5 "$2/infra$3.log" | cut -c1-400 | sed "s/^/$1 log: /"
}

# A RangeStream of every key cancelled midway (read_row's "cancel"),
# then the follower's CPU over the next two seconds: a server that reads
# on for a stream nobody takes shows it here.
cancel_row() {  # name pid port
    local ticks_before
    read_row "$1" cancel "$2" "$3" cancel
    ticks_before=$(pid_ticks "$2")
    sleep 2
    printf '%-10s cancel    then %.0f %% of a core over 2 s\n' "$1" \
        "$(awk -v t=$(($(pid_ticks "$2") - ticks_before)) -v hz="$ticks" 'BEGIN { print t / hz / 2 * 100 }')"
}

# A compaction at a revision past the current one, asked of the
# follower: the error, and how long the answer took.
future_row() {  # name port
    local started revision answer
    revision=$(($(current_revision) + 1000))
    started=$(date +%s.%N)
    answer=$("$ETCDCTL_BIN" --endpoints="127.0.0.1:$2" compact "$revision" 2>&1 | tail -1) || true
    printf '%-10s future    compact %d: %s (%.3f s)\n' "$1" "$revision" "$answer" \
        "$(echo "$(date +%s.%N) - $started" | bc)"
}

# The leader's client endpoint.
leader_endpoint() {
    "$ETCDCTL_BIN" --endpoints=$endpoints endpoint status -w simple | awk -F', ' '$5 == "true" {print $1}'
}

# Leader changes every member has seen, summed, from /metrics.
leader_changes() {
    local member sum=0 count
    for member in ${endpoints//,/ }; do
        count=$(curl -fsS "http://$member/metrics" | awk '/^etcd_server_leader_changes_seen_total / {print $2}')
        sum=$((sum + ${count:-0}))
    done
    echo "$sum"
}

# Loads back to back while an action runs: at most this many.
LOADS_MAX=20

# etcdctl's bound on one compaction or defrag: a compaction of 10M
# revisions under the loads took 581 and 614-622 s on a slow machine
# (2026-11-29), past the ten minutes this was, and the row then lost its
# time; half an hour still ends a hung member's row.
MAINTENANCE_TIMEOUT=1800s

# One load: SCALE_LOAD_PUTS puts at 1000 clients to the leader; prints
# its p99 and longest put in ms and its failed puts.
one_load() {
    local report
    report=$("$ETCD_BENCHMARK_BIN" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --key-space-size="$keys" --val-size=256 --total="$load_puts" 2>&1)
    if [[ $report != *" 99% in "* ]]; then
        echo "a load gave no latencies; etcd's tool said:" >&2
        echo "$report" | tail -20 >&2
        return 1
    fi
    echo "$(echo "$report" | awk '/ 99% in / {printf "%.0f", $3 * 1000}')" \
        "$(echo "$report" | awk '/Slowest:/ {printf "%.0f", $2 * 1000}')" \
        "$(echo "$report" | awk -F'[][]' '/^ *\[[0-9]+\]/ {n += $2} END {print n + 0}')"
}

# Loads without an action.
QUIET_LOADS=3

# Loads of SCALE_LOAD_PUTS puts: QUIET_LOADS of them without ACTION;
# with it (a shell command), ACTION runs 1 s into the first, timed, and
# loads follow back to back while it runs (at most LOADS_MAX), so that
# every put of the action's time is measured. Prints the row: the loads'
# median p99 and the worst, the longest put, failed puts summed, leader
# changes, the loads and their time.
load_row() {  # name row action
    local name=$1 row=$2 action=$3 changes took=- started done longest=0 failed=0 loads=0 load figures p99s=()
    changes=$(leader_changes)
    done=$(mktemp)
    started=$(date +%s.%N)
    if [ -n "$action" ]; then
        (sleep 1; local from outcome=""; from=$(date +%s.%N)
         eval "$action" > /dev/null || outcome=" (failed)"
         printf '%.2f s%s' "$(echo "$(date +%s.%N) - $from" | bc)" "$outcome" > "$done") &
    fi
    while [ "$loads" -lt "$LOADS_MAX" ]; do
        load=$(one_load) || exit 1
        read -r -a figures <<< "$load"
        loads=$((loads + 1))
        p99s+=("${figures[0]}")
        [ "${figures[1]}" -gt "$longest" ] && longest=${figures[1]}
        failed=$((failed + figures[2]))
        if [ -n "$action" ]; then
            [ -s "$done" ] && break
        elif [ "$loads" -ge "$QUIET_LOADS" ]; then
            break
        fi
    done
    wait
    [ -n "$action" ] && took=$(cat "$done")
    rm -f "$done"
    local sorted
    sorted=$(printf '%s\n' "${p99s[@]}" | sort -n)
    printf '%-10s %-9s p99 %s ms (worst %s), longest %s ms, %d failed, %d leader changes, %d loads in %.1f s, took %s\n' \
        "$name" "$row" "$(echo "$sorted" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')" \
        "$(echo "$sorted" | tail -1)" "$longest" "$failed" $(($(leader_changes) - changes)) "$loads" \
        "$(echo "$(date +%s.%N) - $started" | bc)" "$took"
}

# dbSize and dbSizeInUse, in MB: "X MB (in use Y MB)".
db_size_mb() {  # endpoint
    local status
    status=$("$ETCDCTL_BIN" --endpoints="$1" endpoint status -w json)
    printf '%s MB (in use %s MB)' \
        "$(echo "$status" | grep -o '"dbSize":[0-9]*' | awk -F: '{printf "%.0f", $2 / 1048576}')" \
        "$(echo "$status" | grep -o '"dbSizeInUse":[0-9]*' | awk -F: '{printf "%.0f", $2 / 1048576}')"
}

# The cluster's current revision.
current_revision() {
    "$ETCDCTL_BIN" --endpoints=$endpoints endpoint status -w json | grep -o '"revision":[0-9]*' | head -1 | cut -d: -f2
}

maintenance_rows() {  # name dir
    local name=$1 started revision leader before
    started=$(date +%s.%N)
    "$ETCD_BENCHMARK_BIN" --endpoints=$endpoints --target-leader --conns=100 --clients=1000 \
        put --key-size=8 --sequential-keys --key-space-size="$keys" --val-size="$rewrite_bytes" --total="$keys" > /dev/null 2>&1
    revision=$(current_revision)
    printf '%-10s rewrite   %.0f s\n' "$name" "$(echo "$(date +%s.%N) - $started" | bc)"
    load_row "$name" quiet ""
    load_row "$name" compact "'$ETCDCTL_BIN' --endpoints=$endpoints --command-timeout=${MAINTENANCE_TIMEOUT} compact --physical $revision"
    load_row "$name" settled ""
    revision=$(current_revision)
    started=$(date +%s.%N)
    "$ETCDCTL_BIN" --endpoints=$endpoints --command-timeout=${MAINTENANCE_TIMEOUT} compact --physical "$revision" > /dev/null
    printf '%-10s recompact %.0f s, unloaded, at revision %s\n' "$name" "$(echo "$(date +%s.%N) - $started" | bc)" "$revision"
    leader=$(leader_endpoint)
    before=$(db_size_mb "$leader")
    load_row "$name" defrag "'$ETCDCTL_BIN' --endpoints=$leader --command-timeout=${MAINTENANCE_TIMEOUT} defrag"
    printf '%-10s dbsize    %s before the defrag, %s after\n' "$name" "$before" "$(db_size_mb "$leader")"
    # The same defrag once the loads are over: what it gives back idle.
    before=$(db_size_mb "$leader")
    started=$(date +%s.%N)
    "$ETCDCTL_BIN" --endpoints="$leader" --command-timeout=${MAINTENANCE_TIMEOUT} defrag > /dev/null
    printf '%-10s idle      defrag %.2f s, %s before, %s after\n' "$name" \
        "$(echo "$(date +%s.%N) - $started" | bc)" "$before" "$(db_size_mb "$leader")"
}

printf 'scale: %s keys of 256 bytes, 3 members on loopback, %s\n' "$keys" "$(date -u +%F)"
for server in ${SCALE_SERVERS:-etcd etcd-3.7 kv-server}; do
    case "$server" in
    etcd) measure etcd "$ETCD_BIN" ;;
    etcd-3.7) measure etcd-3.7 "$ETCD37_BIN" ;;
    kv-server) measure kv-server "$KV_SERVER_BIN" ;;
    esac
done
