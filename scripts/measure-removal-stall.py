#!/usr/bin/env python3
"""What removing a 64 MiB file costs the disk's other writers.

Beside a writer that appends 4 KiB and fdatasyncs in a loop (as the
value files and sled's log do), a file of SIZE_MIB is removed three ways,
each TRIALS times, in turn:
  none      nothing is removed (the writer alone)
  whole     unlink(2), then the directory's fsync (as the WAL did)
  chunked   truncated CHUNK_MIB at a time, each step fdatasynced, then
            unlinked (crates/wal/src/removal.rs)
For each it prints the writer's syncs during the window (from the
removal's start until 200 ms after its end), their p50 and longest, and
the removal's own time. Run it where the data directories live:
  scripts/measure-removal-stall.py [DIR] (default: a directory in /tmp)
"""
import os
import statistics
import sys
import tempfile
import threading
import time

SIZE_MIB = 64
CHUNK_MIB = 8
TRIALS = 5


def make(path):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    block = b"\0" * (1 << 20)
    for _ in range(SIZE_MIB):
        os.write(fd, block)
    os.fsync(fd)
    os.close(fd)


def sync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def appender(directory, stop, latencies):
    fd = os.open(os.path.join(directory, "appender"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    while not stop.is_set():
        os.write(fd, b"x" * 4096)
        started = time.monotonic()
        os.fdatasync(fd)
        latencies.append((started, time.monotonic() - started))
    os.close(fd)


def remove(directory, path, mode):
    if mode == "whole":
        os.unlink(path)
        sync_dir(directory)
    elif mode == "chunked":
        fd = os.open(path, os.O_WRONLY)
        for mib in range(SIZE_MIB - CHUNK_MIB, -1, -CHUNK_MIB):
            os.ftruncate(fd, mib << 20)
            os.fdatasync(fd)
        os.close(fd)
        os.unlink(path)
    else:
        time.sleep(0.1)


def trial(directory, mode):
    path = os.path.join(directory, "victim")
    make(path)
    sync_dir(directory)
    time.sleep(0.3)
    stop, latencies = threading.Event(), []
    writer = threading.Thread(target=appender, args=(directory, stop, latencies))
    writer.start()
    time.sleep(0.3)
    started = time.monotonic()
    remove(directory, path, mode)
    took = time.monotonic() - started
    time.sleep(0.2)
    stop.set()
    writer.join()
    if os.path.exists(path):
        os.unlink(path)
    window = [latency for (at, latency) in latencies if at >= started]
    return window, took


def main():
    directory = tempfile.mkdtemp(dir=sys.argv[1] if len(sys.argv) > 1 else None)
    results = {mode: [] for mode in ("none", "whole", "chunked")}
    for _ in range(TRIALS):
        for mode in results:
            results[mode].append(trial(directory, mode))
    for mode, trials in results.items():
        syncs = [latency for window, _ in trials for latency in window]
        longest = [max(window) * 1e3 for window, _ in trials]
        took = [t * 1e3 for _, t in trials]
        print(
            f"{mode:8} syncs {len(syncs):5}  p50 {statistics.median(syncs) * 1e3:6.2f} ms"
            f"  longest per trial (ms) {' '.join(f'{x:.1f}' for x in longest)}"
            f"  median {statistics.median(longest):.1f}"
            + (f"  removal took median {statistics.median(took):.1f} ms" if mode != "none" else "")
        )
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)


if __name__ == "__main__":
    main()
