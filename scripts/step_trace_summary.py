#!/usr/bin/env python3
"""Summarises TANDEM_SCHEDULER_TRACE files (engine/runtime/step_trace.h): percentiles of each part
of a pass and of the idle gap before it, by kind of pass (decode only, or with prompt tokens), and
the slowest passes, so an inter-token latency tail can be put on the forward pass, the host's
work around it, or time between passes.

usage: step_trace_summary.py TRACE [TRACE...]
"""
import sys


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0


def main(paths):
    rows = []
    for p in paths:
        for line in open(p):
            if line.startswith("#") or not line.strip():
                continue
            t, plan, fwd, post, gap, dec, pre, nrows = map(int, line.split())
            rows.append(dict(t=t, plan=plan, fwd=fwd, post=post, gap=gap, dec=dec, pre=pre, total=plan + fwd + post + gap))
    if not rows:
        print("no passes in", " ".join(paths))
        return 1
    print("%-22s %6s  %-28s %-28s %-28s %-28s" % ("passes", "n", "plan us p50/p99/max", "forward us p50/p99/max",
                                                 "post us p50/p99/max", "gap us p50/p99/max"))
    for name, sel in (("decode only", lambda r: r["pre"] == 0), ("with prompt tokens", lambda r: r["pre"] > 0),
                      ("all", lambda r: True)):
        g = [r for r in rows if sel(r)]
        if not g:
            continue
        cols = []
        for k in ("plan", "fwd", "post", "gap"):
            v = [r[k] for r in g]
            cols.append("%d / %d / %d" % (pct(v, 0.5), pct(v, 0.99), max(v)))
        print("%-22s %6d  %-28s %-28s %-28s %-28s" % (name, len(g), *cols))
    print("slowest passes (gap + plan + forward + post):")
    for r in sorted(rows, key=lambda r: -r["total"])[:10]:
        print("  t %9.3f s: %6d us (gap %d, plan %d, forward %d, post %d), %d decode, %d prompt tokens" % (
            r["t"] / 1e6, r["total"], r["gap"], r["plan"], r["fwd"], r["post"], r["dec"], r["pre"]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
