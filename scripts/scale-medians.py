#!/usr/bin/env python3
"""Medians of several invocations of scripts/scale-etcd.sh, row by row.

    scripts/scale-medians.py RUN1.log RUN2.log RUN3.log

Each log is one invocation's output. A row is a line that starts with a
server's name and a row's name (`etcd       fill      ...`); the same
row of every log must carry the same numbers in the same places. The
median of each number across the logs is printed in the row's own words,
followed by the values it was taken from, so a reader sees the spread.
Rows missing from some log are printed as missing there.
"""
import re
import statistics
import sys

# A number standing alone, not part of a word (`range100k`).
NUMBER = re.compile(r"(?<![A-Za-z0-9.])-?\d+(?:\.\d+)?")


def rows(path):
    found = {}
    with open(path) as log:
        for line in log:
            parts = line.split(None, 2)
            if len(parts) < 3 or parts[0] not in ("etcd", "etcd-3.7", "kv-server"):
                continue
            key = (parts[0], parts[1])
            # A row name seen again (range's three reads) is numbered.
            n = 1
            while key + (n,) in found:
                n += 1
            found[key + (n,)] = line.rstrip("\n")
    return found


def median_line(lines):
    numbers = [[float(x) for x in NUMBER.findall(line)] for line in lines]
    if len({len(n) for n in numbers}) != 1:
        return None
    template = lines[0]
    medians = [statistics.median(column) for column in zip(*numbers)]
    pieces = NUMBER.split(template)
    out = pieces[0]
    for value, column, piece in zip(medians, zip(*numbers), pieces[1:]):
        decimals = max(len(x.split(".")[1]) if "." in x else 0 for x in [f"{c:g}" for c in column])
        text = f"{value:.{min(decimals, 3)}f}" if decimals else f"{value:.0f}"
        out += text + piece
    return out


def main(paths):
    if len(paths) < 2:
        sys.exit(__doc__)
    logs = [rows(path) for path in paths]
    keys = []
    for log in logs:
        keys.extend(key for key in log if key not in keys)
    for key in keys:
        lines = [log.get(key) for log in logs]
        if any(line is None for line in lines):
            print(f"{key[0]} {key[1]}: missing from {sum(line is None for line in lines)} of {len(lines)} logs")
            continue
        median = median_line(lines)
        if median is None:
            print(f"{key[0]} {key[1]}: rows differ in shape; not merged")
            for line in lines:
                print("    " + line)
            continue
        # The runs' values where they differ, so the spread shows.
        columns = list(zip(*(NUMBER.findall(line) for line in lines)))
        varying = [column for column in columns if len(set(column)) > 1][:4]
        spread = " | ".join(" ".join(column[run] for column in varying) for run in range(len(lines)))
        print(f"{median}    [runs: {spread}]" if varying else median)


if __name__ == "__main__":
    main(sys.argv[1:])
