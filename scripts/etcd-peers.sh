#!/usr/bin/env bash
# Builds (once; cached after) the real etcd tools the tests and benchmarks
# run beside kv-server, with the project's own builder,
# tools/etcd-peers/build.sh (etcd v3.5.17's etcd, etcdctl, etcdutl and
# benchmark tool, and etcd 3.7.3, from pinned Go modules), and prints the
# directory holding them. Go is needed; CI installs it if it is missing
# (see .ci/run). A builder run may fail on a flaky module download; its
# builds are cached, so a failed call is retried, at most PEERS_TRIES times.
set -euo pipefail
cd "$(dirname "$0")/.."
builder=tools/etcd-peers/build.sh
command -v go >/dev/null 2>&1 || { echo "etcd-peers: go is needed to build etcd's tools" >&2; exit 1; }
PEERS_TRIES=3
for try in $(seq 1 "$PEERS_TRIES"); do
    if output=$(bash "$builder"); then
        echo "$output" | tail -n 1
        exit 0
    fi
    echo "etcd-peers: $builder failed (try $try of $PEERS_TRIES)" >&2
done
exit 1
