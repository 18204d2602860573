#!/usr/bin/env bash
# Builds (once; cached after) etcd v3.5.17's etcd, etcdctl and benchmark
# tool with ../shared/peers/build.sh and prints the directory holding them.
# The builder ends with `etcd --version | head -1` under pipefail, which
# fails with SIGPIPE (exit 141) when head exits before etcd has written
# its last line; CI met that once. Its builds are cached, so a failed call
# is retried, at most PEERS_TRIES times.
set -euo pipefail
cd "$(dirname "$0")/.."
builder=../shared/peers/build.sh
[ -f "$builder" ] || { echo "etcd-peers: $builder not found" >&2; exit 1; }
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
