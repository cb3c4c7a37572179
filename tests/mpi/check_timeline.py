#!/usr/bin/env python3
"""Checks GFSHIM_TIMELINE files: each PATH.<rank>.json parses as JSON, its begin/end events are
balanced and nested per thread, every queued operation leaves the queue, and the lazy
allreduce's phases are there, and the REQUIRED phases (an algorithm's inner phases) too.

usage: check_timeline.py PATH RANKS [REQUIRED...]
"""
import json
import sys

PHASES = {"setup", "negotiate", "complete"}


def check(path, rank, required):
    with open(f"{path}.{rank}.json") as f:
        events = json.load(f)["traceEvents"]
    stacks, queued, names = {}, set(), set()
    for e in events:
        assert e["pid"] == rank, f"pid {e['pid']} in rank {rank}'s file"
        names.add(e["name"])
        if e["ph"] == "B":
            stacks.setdefault(e["tid"], []).append(e["name"])
        elif e["ph"] == "E":
            stack = stacks.get(e["tid"], [])
            assert stack and stack[-1] == e["name"], f"end of {e['name']} without its begin"
            stack.pop()
        elif e["ph"] == "b":
            assert e["id"] not in queued, f"operation {e['id']} queued twice"
            queued.add(e["id"])
        elif e["ph"] == "e":
            assert e["id"] in queued, f"operation {e['id']} left a queue it never entered"
            queued.remove(e["id"])
    open_phases = {tid: s for tid, s in stacks.items() if s}
    assert not open_phases, f"phases never ended: {open_phases}"
    assert not queued, f"{len(queued)} operations never left the queue"
    missing = (PHASES | set(required)) - names
    assert not missing, f"phases missing: {missing}"
    assert any(n.startswith("reduce ") for n in names), "no reduce phase"
    assert "pack" in names and "unpack" in names, "no fused bucket"
    return len(events)


def main():
    path, ranks = sys.argv[1], int(sys.argv[2])
    counts = [check(path, r, sys.argv[3:]) for r in range(ranks)]
    print(f"timeline: {ranks} files, {sum(counts)} events, balanced")


if __name__ == "__main__":
    main()
