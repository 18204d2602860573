#!/usr/bin/env bash
# The robustness suite: ROUNDS rounds of a randomized concurrent workload
# against a 3-member kv-server cluster on loopback, one fault per round,
# every history checked for linearizability and etcd's watch guarantees,
# and the members for convergence (HashKV) and lost writes. One line per
# round, then
#   histories=N violations=V nonconverged=C lost_writes=L watch_violations=W ...
# Exits 1 if any round failed; failing rounds leave their history, shrunk
# sub-histories and SVG timelines in the output directory it prints.
#
#   scripts/robustness.sh ROUNDS [--fault F] [--seed S] [other robustness flags]
#   ROBUSTNESS_TARGET=etcd scripts/robustness.sh ROUNDS ...   # the control: real etcd 3.5.17
#
# kv-server is built in release with its failpoints (torn WAL and crash
# faults need them); etcd comes from scripts/etcd-peers.sh or ETCD_BIN.
# docs/robustness.md has the long runs.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:?usage: robustness.sh ROUNDS [--fault F] [--seed S]}
shift
# The member with its failpoints compiled in (the suite arms them to
# break builds on purpose), built alone so that no other package's
# features reach it; then the suite.
cargo build --release -p kv-server --features failpoints >&2
cargo build --release -p robustness >&2
case "${ROBUSTNESS_TARGET:-kv-server}" in
kv-server)
    exec target/release/robustness --binary target/release/kv-server --failpoints --rounds "$rounds" "$@"
    ;;
etcd)
    etcd=${ETCD_BIN:-$(scripts/etcd-peers.sh)/etcd}
    exec target/release/robustness --binary "$etcd" --rounds "$rounds" "$@"
    ;;
*)
    echo "ROBUSTNESS_TARGET must be kv-server or etcd" >&2
    exit 2
    ;;
esac
