#!/usr/bin/env python3
"""Where one decode step's time goes in the chain as it runs, from scripts/kernel_timeline.cpp's CSV.

A step is one replay of a CUDA graph: the kernels of one graph until a graph node repeats (without
graph ids, the kernels between two 20 us idle gaps). The last step with the most common kernel
count is taken. Its kernels, in start order whatever stream CUPTI reports them on (a graph's
replays report several), each "add" how much later the step ends because of them: their end less
the latest end before them (0 for a kernel beside the chain that ends earlier, such as the
second stream's; the gap, their start less that end, is negative when they started early as a
programmatic dependent). The adds sum to the step's span.

Usage: timeline_step.py timeline.csv [--list N] [--at I] [--width W]
"""
import argparse
import collections
import csv
import re


def family(name):
    """The kernel's name without namespaces, template arguments or parameters."""
    n = name
    depth, out = 0, []
    for c in n:  # drop <...> and (...) groups
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif depth == 0:
            out.append(c)
    n = "".join(out).strip()
    n = re.sub(r"^(void )", "", n).split("::")[-1] or name
    # The first template argument tells instances apart (the mat-vec's weight type, say).
    m = re.search(r"<([^;<>]*)", name)
    return f"{n}<{m.group(1).split('::')[-1].strip()}>" if m else n


def steps_by_gaps(rows, gap_ns=20000):
    """Without graph ids (graphs off, or not reported): steps cut where the GPU idles 20 us."""
    out, cur, end = [], [], None
    for r in rows:
        if cur and r["start_ns"] - end > gap_ns:
            out.append(cur)
            cur, end = [], None
        cur.append(r)
        end = r["end_ns"] if end is None else max(end, r["end_ns"])
    if cur:
        out.append(cur)
    return out


def steps(rows):
    """Graph kernels in start order, cut into replays: a new one where a node repeats."""
    if not any(r["graph"] for r in rows):
        return steps_by_gaps(rows)
    cur, seen, out = [], set(), []
    for r in rows:
        if r["graph"] == 0:
            continue
        key = (r["graph"], r["graph_node"])
        if key in seen or (cur and r["graph"] != cur[-1]["graph"]):
            out.append(cur)
            cur, seen = [], set()
        cur.append(r)
        seen.add(key)
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--list", type=int, default=40, help="kernels of the step to list one by one")
    ap.add_argument("--at", type=int, default=-1, help="first listed kernel (default: the middle)")
    ap.add_argument("--width", type=int, default=60)
    a = ap.parse_args()
    with open(a.csv) as f:
        rows = [dict(r) for r in csv.DictReader(f)]
    for r in rows:
        for k in ("start_ns", "end_ns", "stream", "graph", "graph_node", "grid", "block"):
            r[k] = int(r[k])
    rows.sort(key=lambda r: r["start_ns"])
    all_steps = steps(rows)
    if not all_steps:
        print("no kernels in", a.csv)
        return
    common = collections.Counter(len(s) for s in all_steps).most_common(1)[0][0]
    step = [s for s in all_steps if len(s) == common][-1]
    t0 = min(r["start_ns"] for r in step)
    latest = t0
    for r in step:
        r["adds"] = max(0, r["end_ns"] - latest)
        r["gap"] = r["start_ns"] - latest
        latest = max(latest, r["end_ns"])
    span = latest - t0
    busy = sum(r["end_ns"] - r["start_ns"] for r in step)
    print(f"{len(all_steps)} steps; the last of {common} kernels: {span / 1e3:.1f} us "
          f"(their own durations sum to {busy / 1e3:.1f} us)")

    by = collections.OrderedDict()
    for r in step:
        f = by.setdefault(family(r["name"]), [0, 0, 0, 0])
        f[0] += 1
        f[1] += r["adds"]
        f[2] += r["end_ns"] - r["start_ns"]
        f[3] += r["gap"]
    print(f"\n{'kernel':{a.width}} {'n':>4} {'adds us':>9} {'share':>6} {'own us':>9} {'mean gap us':>11}")
    for name, (n, adds, own, gap) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:a.width]:{a.width}} {n:4d} {adds / 1e3:9.1f} {100 * adds / span:5.1f}% {own / n / 1e3:9.2f} "
              f"{gap / n / 1e3:11.2f}")

    at = a.at if a.at >= 0 else max(0, len(step) // 2 - a.list // 2)
    print(f"\nkernels {at}..{at + a.list - 1} of the step (us from its start; gap: start less the latest end before)")
    print(f"{'start':>8} {'dur':>6} {'gap':>6} {'adds':>6} {'grid':>6} {'blk':>4}  kernel")
    for r in step[at:at + a.list]:
        print(f"{(r['start_ns'] - t0) / 1e3:8.2f} {(r['end_ns'] - r['start_ns']) / 1e3:6.2f} {r['gap'] / 1e3:6.2f} "
              f"{r['adds'] / 1e3:6.2f} {r['grid']:6d} {r['block']:4d}  {family(r['name'])[:a.width]}")

if __name__ == "__main__":
    main()
