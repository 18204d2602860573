#!/usr/bin/env bash
# watch-latency against the wire: etcd's tool and loadgen each run etcd's
# watch-latency benchmark on the same real etcd 3-member cluster, as
# scripts/loadgen-accuracy.sh runs its watch-latency row (the tool's
# defaults: one watcher on a follower, the puts to the leader, 100 puts/s;
# members on CPU 0, the tool on the others; idle CPUs are not held
# polling here), while tcpdump captures the two timed connections on
# loopback. For each put, the wire's latency is
# the time from the first packet of the put's answer (leader to putter)
# to the first packet of its event (follower to watcher), no wait when the
# event came first: what both tools mean to time, before either client
# handles a byte. Each run prints the tool's own figures beside the
# wire's, and the packets per put on the two connections.
#   scripts/watch-latency-wire.sh [PUTS] [ROUNDS]   (defaults 1000, 3)
# Needs root (tcpdump), tcpdump, python3, etcd's tools (as
# loadgen-accuracy.sh), and at least 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
puts=${1:-1000}
rounds=${2:-3}
# etcd_tools, follower_leader_follower
source scripts/bench-tools.sh
etcd_tools ETCD_BIN ETCD_BENCHMARK_BIN
command -v tcpdump > /dev/null || { echo "watch-latency-wire: needs tcpdump (apt-get install tcpdump)" >&2; exit 1; }
cargo build --release -p loadgen >&2
work=$(mktemp -d)
trap 'scripts/local-cluster.sh stop "$work/etcd" || true; rm -rf "$work"' EXIT
last_cpu=$(($(nproc) - 1))
[ "$last_cpu" -ge 1 ] || { echo "watch-latency-wire: needs at least 2 CPUs" >&2; exit 1; }
taskset -c 0 scripts/local-cluster.sh start "$ETCD_BIN" "$work/etcd" > /dev/null
"$ETCD_BENCHMARK_BIN" --endpoints=127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379 put --total=1 > /dev/null 2>&1
# The watcher dials the first endpoint, the putter the second.
endpoints=$(follower_leader_follower 127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379)
IFS=, read -r watcher leader _ <<< "$endpoints"
watcher=${watcher##*:} leader=${leader##*:}
flags=(--endpoints="$endpoints" --conns=1 --clients=1 --precise watch-latency --total="$puts" --put-rate=100)

# Per put: the answer is the leader's first packet to the putter of at
# least 55 bytes (a put's response; HTTP/2 control frames are smaller)
# after the request (at least 85 bytes: the key and value are 32 each),
# and the event the follower's first packet of at least 100 bytes (the
# event carries the key and the value).
wire() {  # pcap leader-port follower-port
    python3 - "$@" <<'EOF'
import struct, sys
path, lport, fport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, 'rb').read()
nano = struct.unpack('<I', data[:4])[0] == 0xa1b23c4d
link = struct.unpack('<I', data[20:24])[0]
l2 = {1: 14, 113: 16}.get(link, 0)
packets, off = [], 24
while off + 16 <= len(data):
    sec, frac, size, _ = struct.unpack('<IIII', data[off:off + 16])
    frame, off = data[off + 16:off + 16 + size], off + 16 + size
    ip = frame[l2:]
    if len(ip) < 20 or ip[0] >> 4 != 4:
        continue
    ihl = (ip[0] & 15) * 4
    tcp = ip[ihl:]
    sport, dport = struct.unpack('>HH', tcp[:4])
    payload = struct.unpack('>H', ip[2:4])[0] - ihl - (tcp[12] >> 4) * 4
    if payload > 0:
        packets.append((sec + frac * (1e-9 if nano else 1e-6), sport, dport, payload))
requests = [p for p in packets if p[2] == lport and p[3] >= 85]
latencies = []
for i, (start, client, _, _) in enumerate(requests):
    end = requests[i + 1][0] if i + 1 < len(requests) else start + 1
    inside = [p for p in packets if start < p[0] < end]
    answer = [p[0] for p in inside if p[1] == lport and p[2] == client and p[3] >= 55]
    event = [p[0] for p in inside if p[1] == fport and p[3] >= 100]
    if answer and event:
        latencies.append(max(event[0] - answer[0], 0) * 1e6)
latencies.sort()
n = len(latencies)
at = lambda q: latencies[min(n - 1, int(q * n))]
print(f"{sum(latencies) / n:.1f} {at(.5):.1f} {at(.9):.1f} {at(.99):.1f} {len(packets) / len(requests):.1f}")
EOF
}

# The tool's own report: average, p50, p90 and p99 in µs.
own() {  # report
    awk '/Average:/ { a = $2 * 1e6 } /^ *50% in/ { p50 = $3 * 1e6 } /^ *90% in/ { p90 = $3 * 1e6 }
         /^ *99% in/ { p99 = $3 * 1e6 } END { printf "%.1f %.1f %.1f %.1f\n", a, p50, p90, p99 }' "$1"
}

echo "Same etcd v3.5.17 cluster, watcher on :$watcher, puts to the leader :$leader, $puts puts at 100/s per run, $(date -u +%F), $(nproc) cores."
echo "Latencies in µs: the tool's own report, then the wire's, for the same run."
echo
echo "| run | tool | own avg | own p50 | own p90 | own p99 | wire avg | wire p50 | wire p90 | wire p99 | packets per put |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
# One untimed run of each warms the cluster; then the tools take turns,
# the first place alternating.
taskset -c "1-$last_cpu" "$ETCD_BENCHMARK_BIN" "${flags[@]}" > /dev/null 2>&1
taskset -c "1-$last_cpu" target/release/loadgen "${flags[@]}" > /dev/null 2>&1
for round in $(seq 1 "$rounds"); do
    order="etcd loadgen"
    [ $((round % 2)) = 1 ] || order="loadgen etcd"
    for tool in $order; do
        bin=target/release/loadgen
        [ "$tool" = etcd ] && bin=$ETCD_BENCHMARK_BIN
        taskset -c "1-$last_cpu" tcpdump -i lo -s 96 -w "$work/$tool.pcap" "tcp port $leader or tcp port $watcher" 2> /dev/null &
        capture=$!
        sleep 1
        taskset -c "1-$last_cpu" "$bin" "${flags[@]}" > "$work/$tool.txt" 2> /dev/null
        sleep 0.5
        kill "$capture"
        wait "$capture" || true
        read -r oa o50 o90 o99 < <(own "$work/$tool.txt")
        read -r wa w50 w90 w99 per_put < <(wire "$work/$tool.pcap" "$leader" "$watcher")
        echo "| $round | $tool | $oa | $o50 | $o90 | $o99 | $wa | $w50 | $w90 | $w99 | $per_put |"
    done
done
