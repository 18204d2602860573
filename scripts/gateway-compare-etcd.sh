#!/usr/bin/env bash
# Starts or stops a fresh 3-member real etcd cluster for
# scripts/gateway-compare.py, so its transcript can be made (or checked) against
# etcd itself.
#
#   gateway-compare-etcd.sh start BASE_PORT [ETCD_BINARY]
#   gateway-compare-etcd.sh stop BASE_PORT
#
# Member i (0, 1, 2) listens for clients on BASE_PORT+2i and for peers on
# BASE_PORT+2i+1, on 127.0.0.1 only, with its data in /tmp/gwcmp-BASE_PORT/.
# `start` wipes that directory first, so each start is a fresh cluster, waits
# until every member answers /health, and prints the three client endpoints,
# comma separated. --max-request-bytes is 1 MiB so the comparison's 1.6 MiB
# request body is over the limit. Extra etcd flags can be given in
# GWCMP_ETCD_FLAGS (they come last, so they override).
set -euo pipefail

cmd=${1:?usage: $0 start|stop BASE_PORT [ETCD_BINARY]}
base=${2:?usage: $0 start|stop BASE_PORT [ETCD_BINARY]}
etcd=${3:-/root/.cache/etcd-peers/etcd}
dir=/tmp/gwcmp-$base

stop() {
    # Only the processes this script started: their ids are in pid files.
    for f in "$dir"/m*.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$f"
    done
}

case "$cmd" in
stop)
    stop
    exit 0
    ;;
start)
    stop
    rm -rf "$dir"
    mkdir -p "$dir"
    cluster=""
    for i in 0 1 2; do
        peer=$((base + 2 * i + 1))
        cluster="${cluster:+$cluster,}m$i=http://127.0.0.1:$peer"
    done
    endpoints=""
    for i in 0 1 2; do
        client=$((base + 2 * i))
        peer=$((client + 1))
        "$etcd" --name "m$i" --data-dir "$dir/m$i" \
            --listen-client-urls "http://127.0.0.1:$client" \
            --advertise-client-urls "http://127.0.0.1:$client" \
            --listen-peer-urls "http://127.0.0.1:$peer" \
            --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
            --initial-cluster "$cluster" \
            --initial-cluster-token "gwcmp-$base" \
            --initial-cluster-state new \
            --max-request-bytes 1048576 \
            --log-level warn \
            ${GWCMP_ETCD_FLAGS:-} \
            >"$dir/m$i.log" 2>&1 &
        echo $! >"$dir/m$i.pid"
        endpoints="${endpoints:+$endpoints,}127.0.0.1:$client"
    done
    for i in 0 1 2; do
        client=$((base + 2 * i))
        ok=""
        for _ in $(seq 1 100); do
            if python3 - "$client" <<'EOF' 2>/dev/null; then
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=2)
c.request("GET", "/health")
r = c.getresponse()
sys.exit(0 if r.status == 200 and json.loads(r.read()).get("health") == "true" else 1)
EOF
                ok=1
                break
            fi
            sleep 0.2
        done
        [ -n "$ok" ] || { echo "member on port $client did not become healthy; see $dir/m$i.log" >&2; exit 1; }
    done
    echo "$endpoints"
    ;;
*)
    echo "usage: $0 start|stop BASE_PORT [ETCD_BINARY]" >&2
    exit 2
    ;;
esac
