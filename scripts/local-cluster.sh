#!/usr/bin/env bash
# Starts or stops a 3-member cluster on loopback with etcd's flags, for
# either this project's kv-server or a real etcd binary (same flags):
#   scripts/local-cluster.sh start BINARY DIR [extra member flags...]
#   scripts/local-cluster.sh stop DIR
#   scripts/local-cluster.sh restart BINARY DIR I [extra member flags...]
#     kill -9 of member I (1, 2 or 3), then the same member started again
#     on its data; returns at once (the caller waits for it to serve).
# Members: infra1 (clients 2379, peers 2380), infra2 (22379, 22380),
# infra3 (32379, 32380). Data and logs go under DIR; pids in DIR/pids.
# `start` waits (at most 20 s) until every member reports healthy.
# With TLS_DIR set to a directory scripts/make-certs.sh filled, client and
# peer URLs are https:// with certificate auth on both. With MEMBER_CPUS
# set (a taskset CPU list), the members start bound to those CPUs, so
# Go's GOMAXPROCS and tokio's worker count follow that affinity.
set -euo pipefail
command=${1:?usage: local-cluster.sh start BINARY DIR | stop DIR | restart BINARY DIR I}
scheme=http
tls_flags=()
curl_tls=()
if [ -n "${TLS_DIR:-}" ]; then
    scheme=https
    tls_flags=(--cert-file "$TLS_DIR/member.pem" --key-file "$TLS_DIR/member-key.pem"
        --trusted-ca-file "$TLS_DIR/ca.pem" --client-cert-auth
        --peer-cert-file "$TLS_DIR/member.pem" --peer-key-file "$TLS_DIR/member-key.pem"
        --peer-trusted-ca-file "$TLS_DIR/ca.pem" --peer-client-cert-auth)
    curl_tls=(--cacert "$TLS_DIR/ca.pem" --cert "$TLS_DIR/client.pem" --key "$TLS_DIR/client-key.pem")
fi
cluster="infra1=$scheme://127.0.0.1:2380,infra2=$scheme://127.0.0.1:22380,infra3=$scheme://127.0.0.1:32380"

# Waits, at most 5 s, until none of the pids in FILE is alive.
wait_gone() {  # file
    local pid alive
    for _ in $(seq 1 50); do
        alive=0
        while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done < "$1"
        [ "$alive" = 0 ] && return 0
        sleep 0.1
    done
}

# Starts member I in the background, appending to its log; prints its pid.
start_member() {  # binary dir i [flags...]
    local binary=$1 dir=$2 i=$3 prefix client peer
    shift 3
    prefix=$([ "$i" = 1 ] && echo "" || echo "$i")
    client="$scheme://127.0.0.1:${prefix}2379"; peer="$scheme://127.0.0.1:${prefix}2380"
    local pin=()
    [ -z "${MEMBER_CPUS:-}" ] || pin=(taskset -c "$MEMBER_CPUS")
    ${pin[@]+"${pin[@]}"} "$binary" --name "infra$i" --data-dir "$dir/infra$i" \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "$cluster" --initial-cluster-token local-cluster \
        --initial-cluster-state new ${tls_flags[@]+"${tls_flags[@]}"} "$@" >> "$dir/infra$i.log" 2>&1 &
    echo $!
}

case "$command" in
start)
    binary=${2:?binary}; dir=${3:?dir}; shift 3
    mkdir -p "$dir"
    : > "$dir/pids"
    for i in 1 2 3; do
        start_member "$binary" "$dir" "$i" "$@" >> "$dir/pids"
    done
    for _ in $(seq 1 200); do
        healthy=0
        for port in 2379 22379 32379; do
            curl -fs ${curl_tls[@]+"${curl_tls[@]}"} "$scheme://127.0.0.1:$port/health" 2>/dev/null | grep -q '"health":"true"' && healthy=$((healthy + 1))
        done
        [ "$healthy" = 3 ] && exit 0
        sleep 0.1
    done
    echo "local-cluster: members did not become healthy; see $dir/*.log" >&2
    exit 1
    ;;
stop)
    dir=${2:?dir}
    [ -f "$dir/pids" ] || exit 0
    while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$dir/pids"
    wait_gone "$dir/pids"
    while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$dir/pids"
    # A killed process holds its ports until it is gone; the next cluster
    # on them must not start before.
    wait_gone "$dir/pids"
    rm -f "$dir/pids"
    ;;
restart)
    binary=${2:?binary}; dir=${3:?dir}; i=${4:?member 1, 2 or 3}; shift 4
    old=$(sed -n "${i}p" "$dir/pids")
    kill -9 "$old" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$old" 2>/dev/null || break
        sleep 0.01
    done
    new=$(start_member "$binary" "$dir" "$i" "$@")
    sed -i "${i}s/.*/$new/" "$dir/pids"
    ;;
*) echo "usage: local-cluster.sh start BINARY DIR | stop DIR | restart BINARY DIR I" >&2; exit 2 ;;
esac
