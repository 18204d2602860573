# Sourced by the benchmark scripts: the binaries they run, each taken from
# its variable when set, else built here.

# Sets ETCD_BIN, ETCD_BENCHMARK_BIN, ETCDCTL_BIN and ETCD37_BIN to the
# tools scripts/etcd-peers.sh builds, where unset; etcd-peers.sh is only
# run when one of the variables named is unset.
etcd_tools() {  # names of the variables the script needs
    local name peers missing=
    for name in "$@"; do
        [ -n "${!name:-}" ] || missing=1
    done
    [ -n "$missing" ] || return 0
    peers=$(scripts/etcd-peers.sh)
    ETCD_BIN=${ETCD_BIN:-$peers/etcd}
    ETCD_BENCHMARK_BIN=${ETCD_BENCHMARK_BIN:-$peers/etcd-benchmark}
    ETCDCTL_BIN=${ETCDCTL_BIN:-$peers/etcdctl}
    ETCD37_BIN=${ETCD37_BIN:-$peers/etcd-3.7.3}
}

# Sets KV_SERVER_BIN and LOADGEN_BIN for the packages named (kv-server,
# loadgen), building in release those whose variable is unset. The
# cluster launcher (scripts/local-cluster.sh's binary) is built with them,
# unless LOCAL_CLUSTER_BIN names one.
our_binaries() {  # packages
    local package variable build=()
    for package in "$@"; do
        variable=$(echo "$package" | tr 'a-z-' 'A-Z_')_BIN
        if [ -n "${!variable:-}" ]; then
            continue
        fi
        if [ "$package" = kv-server ]; then
            # Alone, as users build it: built with the others, it would
            # take their features of shared dependencies.
            cargo build --release -p kv-server >&2
        else
            build+=(-p "$package")
        fi
    done
    [ -n "${LOCAL_CLUSTER_BIN:-}" ] || build+=(-p cluster)
    if [ "${#build[@]}" -gt 0 ]; then
        cargo build --release "${build[@]}" >&2
    fi
    KV_SERVER_BIN=${KV_SERVER_BIN:-target/release/kv-server}
    LOADGEN_BIN=${LOADGEN_BIN:-target/release/loadgen}
    export LOCAL_CLUSTER_BIN=${LOCAL_CLUSTER_BIN:-${CARGO_TARGET_DIR:-target}/release/local-cluster}
}

# Prints the three endpoints ordered follower, leader, follower, from
# each member's metrics: etcd's benchmark tool dials its connections over
# the endpoints in turn, so with one watcher the watch-latency benchmark
# then watches on a follower and puts to the leader. Fails unless exactly
# one of the three leads.
follower_leader_follower() {  # host:port,host:port,host:port
    local member leader="" followers=()
    for member in ${1//,/ }; do
        if curl -fsS "http://$member/metrics" | awk '/^etcd_server_is_leader / { l = $2 } END { exit l != 1 }'; then
            leader=$member
        else
            followers+=("$member")
        fi
    done
    [ -n "$leader" ] && [ "${#followers[@]}" = 2 ] || { echo "no single leader among $1" >&2; return 1; }
    echo "${followers[0]},$leader,${followers[1]}"
}
