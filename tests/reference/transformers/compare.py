#!/usr/bin/env python3
"""Compares tandem-model logits JSON with reference.json. Error measure, per position:
max_i |tandem_i - ref_i| / max_i |ref_i| (the row's largest logit sets the scale, so near-zero
logits do not blow up the ratio); the worst position is reported and checked against --tol.
Also reports how often the argmax agrees. Exit status 1 when the tolerance is exceeded."""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("reference")
    ap.add_argument("tandem")
    ap.add_argument("--tol", type=float, required=True)
    ap.add_argument("--name", default="")
    a = ap.parse_args()
    ref = json.load(open(a.reference))
    got = json.load(open(a.tandem))
    if ref["tokens"] != got["tokens"]:
        sys.exit(f"{a.name}: token lists differ")
    worst, agree = 0.0, 0
    for r, g in zip(ref["logits"], got["logits"]):
        if len(r) != len(g):
            sys.exit(f"{a.name}: vocab sizes differ ({len(r)} vs {len(g)})")
        scale = max(abs(x) for x in r)
        worst = max(worst, max(abs(x - y) for x, y in zip(r, g)) / scale)
        agree += max(range(len(r)), key=r.__getitem__) == max(range(len(g)), key=g.__getitem__)
    n = len(ref["logits"])
    ok = worst <= a.tol
    print(f"{a.name}: max rel err {worst:.3e} (tol {a.tol:.0e}), argmax agrees {agree}/{n}: "
          f"{'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
