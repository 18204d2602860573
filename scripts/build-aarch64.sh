#!/usr/bin/env bash
# Builds release binaries of kv-server and loadgen for
# aarch64-unknown-linux-gnu and packages them with a sample systemd unit
# and a sample 3-member configuration:
#   dist/kv-server-<version>-aarch64-unknown-linux-gnu.tar.gz
# With rustup's aarch64 target installed it uses that. Otherwise it works
# offline from Debian's packages, installing them itself: rustc-web and
# cargo-web (a Rust toolchain with the arm64 standard library from
# libstd-rust-web-dev:arm64), gcc-aarch64-linux-gnu (the linker, see
# .cargo/config.toml) and libc6-dev-arm64-cross. The build goes to target/aarch64/, apart from host
# builds, since it may use another compiler.
#   scripts/build-aarch64.sh            prints the tarball's path last
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
version=$(awk -F'"' '/^version = / {print $2; exit}' Cargo.toml)
sudo=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)

install() {  # packages...
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" > /dev/null
}

# The cross gcc links, and compiles mimalloc's C against the arm64 C
# library's headers (a recommendation of the gcc package, named here).
if ! command -v aarch64-linux-gnu-gcc > /dev/null || [ ! -d /usr/aarch64-linux-gnu/include ]; then
    $sudo apt-get update -q > /dev/null
    install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
fi
if rustup target list --installed 2> /dev/null | grep -qx "$target"; then
    echo "build-aarch64: rustup's $target target" >&2
    rustc_env=()
else
    if [ ! -d /usr/lib/rustlib/$target ] || [ ! -x /usr/bin/rustc ]; then
        $sudo dpkg --add-architecture arm64
        $sudo apt-get update -q > /dev/null
        install rustc-web cargo-web "libstd-rust-web-dev:arm64"
    fi
    echo "build-aarch64: Debian's $(/usr/bin/rustc --version) with the arm64 standard library" >&2
    rustc_env=(RUSTC=/usr/bin/rustc)
fi
# One at a time: built together, kv-server would take loadgen's features
# of their shared dependencies.
for package in kv-server loadgen; do
    env "${rustc_env[@]}" CARGO_TARGET_DIR=target/aarch64 \
        cargo build --release --locked --target "$target" -p "$package" >&2
done

out=target/aarch64/$target/release
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
name=kv-server-$version-$target
mkdir -p "$stage/$name"
cp "$out/kv-server" "$out/loadgen" "$stage/$name/"
# Shipped without debug info (a tenth of the size); build from source for
# profiling symbols.
aarch64-linux-gnu-strip "$stage/$name/kv-server" "$stage/$name/loadgen"
cp -r deploy/. "$stage/$name/"
mkdir -p dist
tar -C "$stage" -czf "dist/$name.tar.gz" "$name"
echo "dist/$name.tar.gz"
