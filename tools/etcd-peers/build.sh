#!/usr/bin/env bash
# Builds the real etcd binaries this project compares against and tests
# with, from the Go modules pinned beside this file (go.mod and go.sum in
# v3.5/ and v3.7/, so every build gets the same sources, checked by Go's
# checksums):
#   etcd            etcd v3.5.17's server
#   etcdctl         its command-line client
#   etcdutl         its offline tool (snapshot restore and status)
#   etcd-benchmark  its load generator (tools/benchmark)
#   etcd-3.7.3      the newest etcd server
# Usage: build.sh [OUT_DIR]   (default: $HOME/.cache/etcd-peers). Prints
# OUT_DIR as its last line. Needs Go and the Go module proxy; a few minutes
# on a 2-core machine the first time, nothing after (each binary is built
# once).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$HOME/.cache/etcd-peers}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# -mod=mod: the modules list their requirements as indirect (there is no
# Go source to import them), so Go must be allowed to read go.mod as the
# build list; go.sum still checks every module's checksum.
export GOFLAGS=-mod=mod

build() { # build MODULE_DIR OUTPUT PACKAGE
    [ -x "$out/$2" ] && return 0
    (cd "$here/$1" && go build -o "$out/$2.tmp" "$3") && mv "$out/$2.tmp" "$out/$2"
}

build v3.5 etcd go.etcd.io/etcd/server/v3
build v3.5 etcd-benchmark go.etcd.io/etcd/v3/tools/benchmark
build v3.5 etcdctl go.etcd.io/etcd/etcdctl/v3
build v3.5 etcdutl go.etcd.io/etcd/etcdutl/v3
build v3.7 etcd-3.7.3 go.etcd.io/etcd/server/v3

"$out/etcd" --version >/dev/null
"$out/etcd-3.7.3" --version >/dev/null
echo "$out"
