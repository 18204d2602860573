#!/usr/bin/env bash
# Lists every flag of etcd's server, from etcd's own flag set, for each
# pinned version (tools/etcd-peers/v3.5 and v3.7): name, kind, default and
# usage, tab-separated, into crates/kv-server/src/flags/etcd-VERSION.tsv.
# kv-server's flag front end reads those lists, and a test fails when a
# flag in them is refused (crates/kv-server/src/flags/etcd_set.rs).
#
# How: a copy of etcd's server module (from Go's module cache, in a
# temporary folder) gets one more file in its etcdmain package
# (dump.go.txt), which walks the flag set etcd builds in its newConfig; a
# tiny main (main.go.txt), built with that copy in place of the module,
# calls it. Nothing of etcd is changed, on disk or in the pinned modules.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
export GOFLAGS=-mod=mod
for pair in v3.5:3.5.17 v3.7:3.7.3; do
    module=${pair%%:*}
    version=${pair##*:}
    work=$(mktemp -d)
    cp "$here/../$module/go.mod" "$here/../$module/go.sum" "$work/"
    server=$(cd "$work" && go mod download -json go.etcd.io/etcd/server/v3 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    cp -r "$server" "$work/server" && chmod -R u+w "$work/server"
    cp "$here/dump.go.txt" "$work/server/etcdmain/zz_dump_flag_set.go"
    mkdir -p "$work/cmd" && cp "$here/main.go.txt" "$work/cmd/main.go"
    (cd "$work" && go mod edit -replace go.etcd.io/etcd/server/v3=./server && go build -o dump ./cmd)
    out="$root/crates/kv-server/src/flags/etcd-$version.tsv"
    "$work/dump" | LC_ALL=C sort > "$out"
    echo "etcd $version: $(wc -l < "$out") flags"
    rm -rf "$work"
done
