#!/usr/bin/env python3
"""Writes a small snapshot pickle whose frames are mostly references.

Python's pickler writes an object once and then refers to it by its memo
index (BINGET: 2 bytes). This trace uses that to make a few kilobytes of
.pickle.gz describe gigabytes of frames, the way a hostile file would:

  - one frame dict whose "name" is a NAME_BYTES string, written once;
  - every recorded entry has its own frames list (a new list, so readers
    that share a context per list cannot share it), holding FRAMES
    references to that one dict.

A reader that copies each frame's strings needs about
ENTRIES x FRAMES x NAME_BYTES bytes for them (and as much again to build the
replayed snapshot); one that shares what the pickle shares needs about
NAME_BYTES plus a few dozen bytes per reference.

The events replay clean (one 2 MiB segment; a 512-byte block allocated and
freed over and over), so `cachealloc replay --snapshot` goes through the
replay and writes every entry's frames back out.

    python3 tests/frames_amplification.py OUT.pickle.gz \
        [--name-bytes 65536] [--frames 64] [--entries 150]
    /usr/bin/time -v build/tools/cachealloc replay --snapshot /tmp/x.pickle OUT.pickle.gz

With the defaults: 150 entries x 64 frames x 64 KiB = 600 MiB of name
copies per copy made.
"""
import argparse
import gzip
import pickle

SEGMENT = 1 << 30   # the segment's (recorded) address
SEGMENT_BYTES = 2 << 20
BLOCK_BYTES = 512


def snapshot(name_bytes: int, frames: int, entries: int) -> dict:
    frame = {"name": "n" * name_bytes, "filename": "hostile.py", "line": 1}

    def event(action, size):
        return {"action": action, "addr": SEGMENT, "size": size, "stream": 0,
                "frames": [frame] * frames}

    trace = [event("segment_alloc", SEGMENT_BYTES)]
    while len(trace) < entries:
        trace += [event("alloc", BLOCK_BYTES), event("free_requested", BLOCK_BYTES),
                  event("free_completed", BLOCK_BYTES)]
    return {"segments": [], "device_traces": [trace]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="where to write the .pickle.gz")
    p.add_argument("--name-bytes", type=int, default=64 << 10,
                   help="length of the one frame name (bytes)")
    p.add_argument("--frames", type=int, default=64, help="references per frames list")
    p.add_argument("--entries", type=int, default=150, help="recorded entries (at least)")
    a = p.parse_args()
    data = pickle.dumps(snapshot(a.name_bytes, a.frames, a.entries), protocol=4)
    with open(a.out, "wb") as f:
        f.write(gzip.compress(data, mtime=0))


if __name__ == "__main__":
    main()
