#!/usr/bin/env bash
# Scale rows, side by side: etcd 3.5.17 and kv-server, each a 3-member
# cluster on loopback, filled with KEYS distinct keys of 256-byte values
# by etcd's benchmark tool (1000 clients, 100 connections, to the leader).
# Per server it prints:
#   fill      the fill's requests/s and the members' CPU per put
#   rss       the largest member RSS before and after the fill, and the
#             growth per key (after - before, over KEYS)
#   range     a serializable range of 100,000 keys (--limit) from one
#             follower, 5 times, one at a time: average latency, and that
#             member's RSS before and after
#   restart   kill -9 of that follower, then the time from its start until
#             it answers a serializable get (its port polled every 20 ms,
#             then etcdctl)
#   scripts/scale-etcd.sh [KEYS]     (default 1000000)
# SCALE_SERVERS picks the servers and their order (default "etcd kv-server").
# Needs etcd's tools (scripts/etcd-peers.sh); builds kv-server and loadgen.
set -euo pipefail
cd "$(dirname "$0")/.."
keys=${1:-1000000}
# etcd_tools, our_binaries
source scripts/bench-tools.sh
etcd_tools ETCD_BIN ETCD_BENCHMARK_BIN ETCDCTL_BIN
our_binaries kv-server loadgen
ticks=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/etcd" || true; scripts/local-cluster.sh stop "$work/kv-server" || true; [ -n "${SCALE_KEEP:-}" ] || rm -rf "$work"' EXIT
endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
# Bounds on the waits below, in 20 ms polls: a minute.
POLLS_MAX=3000

# member_ticks, rss_kb, max_rss_kb
source scripts/member-stats.sh

# A member that is not the leader: 2, unless 2 leads, then 3.
follower() {
    if "$ETCDCTL_BIN" --endpoints=127.0.0.1:22379 endpoint status -w simple | awk -F', ' '{print $5}' | grep -q true; then
        echo 3
    else
        echo 2
    fi
}

measure() {  # name binary
    local name=$1 binary=$2 dir="$work/$1" before after started ticks_before report member port pid
    scripts/local-cluster.sh start "$binary" "$dir"
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
    member=$(follower)
    port=$([ "$member" = 2 ] && echo 22379 || echo 32379)
    pid=$(sed -n "${member}p" "$dir/pids")
    before=$(rss_kb "$pid")
    report=$("$LOADGEN_BIN" range "" --from-key --limit 100000 --consistency s --total 5 --clients 1 \
        --endpoints "127.0.0.1:$port" 2>&1)
    printf '%-10s range     100000 keys: %s s average, member %d MB before, %d MB after\n' "$name" \
        "$(echo "$report" | awk '/Average:/ {print $2}')" $((before / 1024)) $(($(rss_kb "$pid") / 1024))
    scripts/local-cluster.sh restart "$binary" "$dir" "$member"
    started=$(date +%s.%N)
    local served=no
    for _ in $(seq 1 $POLLS_MAX); do
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
    scripts/local-cluster.sh stop "$dir"
}

printf 'scale: %s keys of 256 bytes, 3 members on loopback, %s\n' "$keys" "$(date -u +%F)"
for server in ${SCALE_SERVERS:-etcd kv-server}; do
    case "$server" in
    etcd) measure etcd "$ETCD_BIN" ;;
    kv-server) measure kv-server "$KV_SERVER_BIN" ;;
    esac
done
