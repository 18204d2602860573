#!/usr/bin/env bash
# Starts or stops a 3-member cluster on loopback with etcd's flags, for
# either this project's kv-server or a real etcd binary (same flags):
#   scripts/local-cluster.sh start BINARY DIR [extra member flags...]
#   scripts/local-cluster.sh stop DIR
#   scripts/local-cluster.sh restart BINARY DIR I [extra member flags...]
#     kill -9 of member I (1, 2 or 3), then the same member started again
#     on its data; returns at once (the caller waits for it to serve).
#   scripts/local-cluster.sh endpoints
# Members: infra1 (clients 2379, peers 2380), infra2 (22379, 22380),
# infra3 (32379, 32380). Data and logs go under DIR; pids in DIR/pids.
# `start` waits (at most 120 s) until every member reports healthy.
# With TLS_DIR set to a directory scripts/make-certs.sh filled, client and
# peer URLs are https:// with certificate auth on both. With MEMBER_CPUS
# set (a taskset CPU list), the members start bound to those CPUs, so
# Go's GOMAXPROCS and tokio's worker count follow that affinity.
#
# The launcher itself is the `local-cluster` binary of crates/cluster,
# the one the tests and the robustness suite use too. LOCAL_CLUSTER_BIN
# names a built one (the benchmark scripts set it through
# scripts/bench-tools.sh, so no build runs inside what they time); else
# cargo builds it here, at once when it is up to date.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${LOCAL_CLUSTER_BIN:-}" ]; then
    LOCAL_CLUSTER_BIN="${CARGO_TARGET_DIR:-$root/target}/release/local-cluster"
    (cd "$root" && cargo build --release -q -p cluster --bin local-cluster) >&2
fi
exec "$LOCAL_CLUSTER_BIN" "$@"
