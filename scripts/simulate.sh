#!/usr/bin/env bash
# The deterministic simulator: SEEDS seeds, each a whole cluster of real
# members (3, or 5 for every fourth seed) on one thread and a simulated
# clock, under network, disk and process faults, every history checked
# (linearizability, convergence, lost writes). Ends with one line,
#   seeds=N violations=V diverged=D lost_writes=L undecided=U simulated_s=T wall_s=W
# and exits 1 when a seed fails; a failed seed prints the command that
# replays it and its shrunk history.
#
#   scripts/simulate.sh SEEDS [--seed S] [--members 3|5] [--history FILE] [--jobs J] [--break NAME]
#
# --seed is the first seed (1); --history writes the first seed's history
# (a failed one's, if any) as JSON; --jobs runs seeds on that many threads
# (default: every CPU); --break arms a build broken on purpose (stale-read,
# ack-before-fsync, double-apply, skip-term-check, watch-resume-skips),
# which needs the member's failpoints compiled in: this script does that
# when it sees it.
# SIMULATOR_BIN runs a simulator already built. docs/robustness.md has the
# long runs; RUST_LOG shows a replayed seed's member logs.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
features=()
for arg in "$@"; do
    [ "$arg" = --break ] && features=(--features failpoints)
done
if [ -z "${SIMULATOR_BIN:-}" ]; then
    cargo build --release -q -p simulator "${features[@]}" >&2
    SIMULATOR_BIN=target/release/simulator
fi
jobs=()
case " $* " in
*" --jobs "*) ;;
*) jobs=(--jobs "$(nproc)") ;;
esac
exec "$SIMULATOR_BIN" "$@" "${jobs[@]}"
