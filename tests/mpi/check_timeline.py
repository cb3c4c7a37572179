#!/usr/bin/env python3
"""Checks GFSHIM_TIMELINE files: each PATH.<rank>.json parses as JSON, its begin/end events are
balanced and nested per thread, every queued operation leaves the queue, and the lazy
allreduce's phases are there, and the REQUIRED phases (an algorithm's inner phases) too. With
--before-us T every timestamp is below T microseconds: under SimGrid SMPI the clock is the
simulated one, which starts at 0, not the system clock (about 1.7e15 us in 2026).

usage: check_timeline.py [--before-us T] PATH RANKS [REQUIRED...]
"""
import json
import sys

PHASES = {"setup", "negotiate", "complete"}


def check(path, rank, required, before_us):
    with open(f"{path}.{rank}.json") as f:
        events = json.load(f)["traceEvents"]
    stacks, queued, names = {}, set(), set()
    for e in events:
        assert e["pid"] == rank, f"pid {e['pid']} in rank {rank}'s file"
        assert before_us is None or e["ts"] < before_us, f"timestamp {e['ts']} not below {before_us}"
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
    args = sys.argv[1:]
    before_us = None
    if args[0] == "--before-us":
        before_us = float(args[1])
        args = args[2:]
    path, ranks = args[0], int(args[1])
    counts = [check(path, r, args[2:], before_us) for r in range(ranks)]
    print(f"timeline: {ranks} files, {sum(counts)} events, balanced")


if __name__ == "__main__":
    main()
