#!/usr/bin/env bash
# Creates (or reuses) a Python virtualenv holding the real Python etcd clients
# that patroni_flows.py and etcd3gw_flows.py drive through the gRPC-JSON
# gateway, and prints the venv's python as the last line of output.
#
#   setup.sh VENV_DIR
#
# Every package is pinned, the clients and everything they pull in, so two
# machines (or a later run) drive exactly the same client code: the flows'
# transcripts are compared byte for byte, and a newer requests/urllib3 could
# change how the HTTP is framed. The list is what pip resolved for the two
# clients on Python 3.11 when the flows were written.
#
# Idempotent: when VENV_DIR already has every pinned version, nothing is
# downloaded and only the python path is printed.
set -euo pipefail

venv=${1:?usage: $0 VENV_DIR}
py="$venv/bin/python"

# The two clients under test, then their dependencies (patroni[etcd3] brings
# python-etcd, urllib3, dnspython, ...; etcd3gw brings requests and futurist).
# psycopg2-binary is there only because patroni.dcs imports patroni.postgresql,
# which imports a psycopg at module load; no PostgreSQL is used or needed (the
# binary wheel carries its own libpq).
pins=(
    "patroni[etcd3]==4.1.5"
    "etcd3gw==2.7.0"
    "psycopg2-binary==2.9.13"
    "python-etcd==0.4.5"
    "urllib3==2.8.0"
    "requests==2.34.2"
    "certifi==2026.10.19.post1"
    "charset-normalizer==3.5.3"
    "idna==3.20"
    "dnspython==2.9.2"
    "PyYAML==6.0.4"
    "psutil==7.2.2"
    "click==8.5.1"
    "prettytable==3.18.0"
    "wcwidth==0.9.4"
    "python-dateutil==4.0.0"
    "ydiff==1.4.2"
    "py-consul==1.8.0"
    "futurist==3.5.0"
    "debtcollector==3.1.0"
    "wrapt==2.5.2"
    "pbr==7.1.3"
    "tzdata==2026.6"
)

# True when the venv already has every pin: compare "name==version" lines of
# pip freeze (extras such as [etcd3] are not part of freeze's output, and
# freeze spells names as their distributions do, so compare case-blind with
# '_' and '-' folded together).
have_all_pins() {
    [ -x "$py" ] || return 1
    local frozen
    frozen=$("$py" -m pip freeze 2>/dev/null | tr 'A-Z_' 'a-z-') || return 1
    local p name
    for p in "${pins[@]}"; do
        name=$(printf '%s' "$p" | sed 's/\[[^]]*\]//' | tr 'A-Z_' 'a-z-')
        grep -qxF "$name" <<<"$frozen" || return 1
    done
    return 0
}

if ! have_all_pins; then
    if [ ! -x "$py" ]; then
        python3 -m venv "$venv"
    fi
    # --disable-pip-version-check: no extra look-up on the registry.
    "$py" -m pip install --disable-pip-version-check --quiet "${pins[@]}" >&2
    if ! have_all_pins; then
        echo "setup.sh: $venv does not have the pinned versions after pip install" >&2
        exit 1
    fi
fi

# Make sure the clients import (a broken venv would otherwise only show up as
# a confusing failure inside a flow).
"$py" -c 'import patroni.dcs.etcd3, etcd3gw' >&2

echo "$py"
