#!/usr/bin/env bash
# Makes test certificates with openssl, for TLS runs of the benchmark
# scripts (the integration tests make theirs in Rust):
#   scripts/make-certs.sh DIR
# DIR/ca.pem                          a CA, made here
# DIR/member.pem, DIR/member-key.pem  for 127.0.0.1 and localhost, server
#                                     and client use (members and peers)
# DIR/client.pem, DIR/client-key.pem  a client, common name "root"
# Keys are EC P-256, certificates valid 7 days: for test runs only.
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout ca-key.pem -out ca.pem -days 7 -subj "/CN=kv-server test CA" 2> /dev/null
leaf() {  # name common-name extensions
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$1-key.pem" -out "$1.csr" -subj "/CN=$2" 2> /dev/null
    printf '%s\n' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
        -out "$1.pem" -days 7 -extfile "$1.ext" 2> /dev/null
    rm -f "$1.csr" "$1.ext"
}
usage="keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
leaf member member "subjectAltName=IP:127.0.0.1,DNS:localhost
$usage"
leaf client root "$usage"
