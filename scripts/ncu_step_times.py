#!/usr/bin/env python3
"""Per-kernel GPU time of one decode step, from an Nsight Compute CSV of a bench run.

On the GPU machine (no Nsight Systems there; ncu times each kernel alone, so launch gaps and
programmatic-dependent overlap are not in the sum):
  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \\
      tandem-model bench -m M.gguf -p 16 -n 3 -r 1 --no-ceilings > ncu.csv
  scripts/ncu_step_times.py ncu.csv
A step is the kernels after one argmax launch up to and including the next; the last complete one
is shown (--step -2 the one before it, ...), grouped by kernel and grid, largest total first."""
import argparse
import collections
import csv
import io
import re
import sys


def read_rows(path):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    head = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if head is None:
        sys.exit("ncu_step_times: no CSV header (\"ID\",...) in %s" % path)
    return list(csv.DictReader(io.StringIO("\n".join(lines[head:]))))


def short_name(name):
    """matvec_kernel<mq_q4_k, 1, 4, 32, 0> from ncu's demangled signature."""
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"(tandem::)?(<unnamed>|unnamed>|\(anonymous namespace\))::", "", name)
    name = name.replace("tandem::", "").replace("mv::", "")
    return name.split("(")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=-1, help="which step: -1 the last complete one")
    args = ap.parse_args()
    rows = read_rows(args.csv)
    seq = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}
        us = float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1e-3)
        seq.append((short_name(r["Kernel Name"]), r["Grid Size"], us))
    ends = [i for i, (n, _, _) in enumerate(seq) if n.startswith("argmax")]
    if len(ends) < 2 or len(ends) < -args.step + 1:
        sys.exit("ncu_step_times: fewer complete steps than asked (%d argmax launches)" % len(ends))
    b = ends[args.step]
    a = ends[args.step - 1]
    step = seq[a + 1:b + 1]
    total = sum(us for _, _, us in step)
    groups = collections.OrderedDict()
    for name, grid, us in step:
        g = groups.setdefault((name, grid), [0, 0.0])
        g[0] += 1
        g[1] += us
    print("%d kernels, %.1f us of kernel time in the step" % (len(step), total))
    print("| kernel | grid | launches | us each | us total | share |")
    print("|---|---|---|---|---|---|")
    for (name, grid), (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print("| `%s` | %s | %d | %.2f | %.1f | %.1f%% |" % (name, grid.replace(" ", ""), n, us / n, us, 100 * us / total))


if __name__ == "__main__":
    main()
