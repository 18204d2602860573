#!/usr/bin/env bash
# Smoke test of the aarch64 release on emulated aarch64: boots Debian's
# arm64 kernel under qemu-system-aarch64 (-M virt -cpu max) with a busybox
# initramfs that holds the cross-built kv-server and loadgen, and inside
# the guest, on its loopback:
#   1. starts a 3-member cluster;
#   2. runs loadgen put (1,000 requests, 10 clients) and a range;
#   3. kills one member with SIGKILL, restarts it, and checks on it that
#      every acknowledged key is readable (a linearizable count);
#   4. prints a last line with "ok" and the measured put QPS.
# On any failure it exits non-zero with the reason. It builds the binaries
# with scripts/build-aarch64.sh unless AARCH64_BIN_DIR names a directory
# holding them, and installs what it needs with apt-get: qemu-system-arm,
# cpio, and (downloaded, not installed) Debian's linux-image arm64 kernel
# and busybox-static:arm64. Full-system emulation is used because
# qemu-user cannot run threaded programs on this project's machines.
#   scripts/aarch64-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Bounds: the whole guest run, and each wait inside it.
GUEST_TIMEOUT_SECS=900
sudo=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
fail() { echo "aarch64 smoke: FAILED: $*"; exit 1; }

need=()
command -v qemu-system-aarch64 > /dev/null || need+=(qemu-system-arm)
command -v cpio > /dev/null || need+=(cpio)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
    $sudo apt-get update -q > /dev/null
fi
if [ ${#need[@]} -gt 0 ]; then
    $sudo apt-get update -q > /dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}" > /dev/null
fi

if [ -z "${AARCH64_BIN_DIR:-}" ]; then
    scripts/build-aarch64.sh > /dev/null
    AARCH64_BIN_DIR=target/aarch64/aarch64-unknown-linux-gnu/release
fi
for binary in kv-server loadgen; do
    [ -x "$AARCH64_BIN_DIR/$binary" ] || fail "$AARCH64_BIN_DIR/$binary is missing"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(
    cd "$work"
    kernel_package=$(apt-cache depends linux-image-arm64:arm64 | awk '/Depends: linux-image-/ {print $2; exit}')
    apt-get download "$kernel_package" busybox-static:arm64 > /dev/null 2>&1
) || fail "could not download the arm64 kernel and busybox"
mkdir -p "$work/kernel" "$work/busybox"
dpkg-deb -x "$work"/linux-image-*_arm64.deb "$work/kernel"
dpkg-deb -x "$work"/busybox-static_*_arm64.deb "$work/busybox"
kernel=$(ls "$work"/kernel/boot/vmlinuz-* | head -n 1)

# The initramfs: busybox, the binaries, and the C libraries they link.
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,data,lib/aarch64-linux-gnu,usr/local/bin}
cp "$work/busybox/bin/busybox" "$root/bin/"
for applet in sh mount mkdir sleep cat grep awk kill wget ip poweroff seq tail head sync; do
    ln -s busybox "$root/bin/$applet"
done
cp "$AARCH64_BIN_DIR/kv-server" "$AARCH64_BIN_DIR/loadgen" "$root/usr/local/bin/"
aarch64-linux-gnu-strip "$root/usr/local/bin/kv-server" "$root/usr/local/bin/loadgen"
sysroot=/usr/aarch64-linux-gnu/lib
[ -d "$sysroot" ] || fail "$sysroot is missing (package libc6-arm64-cross, with gcc-aarch64-linux-gnu)"
for library in $(aarch64-linux-gnu-readelf -d "$root/usr/local/bin/kv-server" "$root/usr/local/bin/loadgen" |
    awk -F'[][]' '/NEEDED/ {print $2}' | sort -u) ld-linux-aarch64.so.1; do
    cp -L "$sysroot/$library" "$root/lib/aarch64-linux-gnu/"
done
cp -L "$sysroot/ld-linux-aarch64.so.1" "$root/lib/"

cat > "$root/init" <<'INIT'
#!/bin/sh
# The guest's side of scripts/aarch64-smoke.sh. Every wait is bounded.
export PATH=/bin:/usr/local/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2> /dev/null
mount -t tmpfs -o size=1g tmpfs /data
ip link set lo up
fail() {
    echo "SMOKE FAIL: $*"
    for log in /data/infra*.log; do echo "== $log"; tail -n 5 "$log"; done
    sync
    poweroff -f
}
cluster=infra1=http://127.0.0.1:2380,infra2=http://127.0.0.1:12380,infra3=http://127.0.0.1:22380
start() {  # member client-port peer-port
    kv-server --name "infra$1" --data-dir "/data/infra$1" \
        --listen-client-urls "http://127.0.0.1:$2" --advertise-client-urls "http://127.0.0.1:$2" \
        --listen-peer-urls "http://127.0.0.1:$3" --initial-advertise-peer-urls "http://127.0.0.1:$3" \
        --initial-cluster "$cluster" --initial-cluster-token smoke --initial-cluster-state new \
        >> "/data/infra$1.log" 2>&1 &
    echo $! > "/data/infra$1.pid"
}
healthy() { wget -q -O - "http://127.0.0.1:$1/health" 2> /dev/null | grep -q '"health":"true"'; }
wait_healthy() {  # ports...; at most 300 s
    for _ in $(seq 1 600); do
        all=1
        for port in "$@"; do healthy "$port" || all=0; done
        [ "$all" = 1 ] && return 0
        sleep 0.5
    done
    return 1
}
echo "SMOKE kernel $(cat /proc/sys/kernel/osrelease), $(grep -c ^processor /proc/cpuinfo) CPUs"
start 1 2379 2380
start 2 12379 12380
start 3 22379 22380
wait_healthy 2379 12379 22379 || fail "the cluster did not become healthy"
endpoints=127.0.0.1:2379,127.0.0.1:12379,127.0.0.1:22379
loadgen put --endpoints "$endpoints" --clients 10 --conns 3 --total 1000 \
    --sequential-keys --key-space-size 1000 --val-size 64 > /data/put.txt 2>&1 ||
    fail "loadgen put: $(tail -n 3 /data/put.txt)"
grep -q "Error distribution" /data/put.txt && fail "puts failed: $(cat /data/put.txt)"
qps=$(awk '/Requests\/sec:/ {print $2}' /data/put.txt)
echo "SMOKE put: 1000 acknowledged, $qps requests/s"
loadgen range "" --from-key --count-only --endpoints "$endpoints" --clients 4 --total 100 \
    --expect-count 1000 > /data/range.txt 2>&1 || fail "loadgen range: $(tail -n 3 /data/range.txt)"
grep -q "Error distribution" /data/range.txt && fail "ranges failed: $(cat /data/range.txt)"
echo "SMOKE range: $(awk '/Requests\/sec:/ {print $2}' /data/range.txt) requests/s, each counting 1000 keys"
kill -9 "$(cat /data/infra2.pid)"
sleep 1
start 2 12379 12380
wait_healthy 12379 || fail "the killed member did not come back"
loadgen range "" --from-key --count-only --endpoints 127.0.0.1:12379 --total 10 \
    --expect-count 1000 > /data/after.txt 2>&1 || fail "loadgen range after restart: $(tail -n 3 /data/after.txt)"
grep -q "Error distribution" /data/after.txt && fail "keys missing after the restart: $(cat /data/after.txt)"
echo "SMOKE restart: the SIGKILLed member serves all 1000 acknowledged keys"
echo "SMOKE ok put_qps=$qps"
sync
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

echo "aarch64 smoke: booting $(basename "$kernel") under qemu-system-aarch64 -M virt -cpu max" >&2
set +e
timeout "$GUEST_TIMEOUT_SECS" qemu-system-aarch64 -M virt -cpu max -smp 2 -m 2048 \
    -nographic -no-reboot -nic none -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "console=ttyAMA0 rdinit=/init panic=-1 quiet" < /dev/null > "$work/console.log" 2>&1
status=$?
set -e
grep "^SMOKE" "$work/console.log" >&2 || true
result=$(grep -a "^SMOKE ok" "$work/console.log" | tr -d '\r' || true)
if [ -z "$result" ]; then
    [ "$status" = 124 ] && reason="the guest did not finish within ${GUEST_TIMEOUT_SECS}s" || reason="qemu exited $status"
    tail -n 30 "$work/console.log" >&2
    fail "$reason; $(grep -a '^SMOKE FAIL' "$work/console.log" | tr -d '\r' | head -n 1)"
fi
echo "aarch64 smoke: ok, put QPS ${result#SMOKE ok put_qps=} (3 members and loadgen in one emulated aarch64 guest)"
