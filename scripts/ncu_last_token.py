#!/usr/bin/env python3
"""Where a decode token's time goes, kernel by kernel: reads the CSV of
`ncu --metrics gpu__time_duration.sum --csv --print-units base tandem-model bench ... -n N`
(graphs off, so every launch is its own kernel) and prints the kernels of the last decode token
(after the second-to-last argmax, through the last) with their microseconds and the sum.
Kernels run one at a time under ncu, so the sum exceeds the token's real time.
Usage: python3 scripts/ncu_last_token.py ncu.csv [--width N]"""
import argparse
import csv
import io
import sys


def kernels(text):
    start = text.find('"ID"')
    if start < 0:
        sys.exit("ncu_last_token: no ncu CSV table in the input")
    rows = csv.DictReader(io.StringIO(text[start:]))
    return [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")))
            for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--width", type=int, default=100, help="characters of each kernel name")
    a = ap.parse_args()
    with open(a.csv, encoding="utf-8", errors="replace") as f:
        ks = kernels(f.read())
    ends = [i for i, (name, _) in enumerate(ks) if "argmax" in name]
    if len(ends) < 2:
        sys.exit(f"ncu_last_token: {len(ends)} argmax launches in {len(ks)} kernels; run at least two decode tokens")
    total = 0.0
    for name, ns in ks[ends[-2] + 1:ends[-1] + 1]:
        total += ns
        print(f"{ns / 1000:9.2f} us  {name[:a.width]}")
    print(f"{total / 1000:9.1f} us  in all ({ends[-1] - ends[-2]} kernels)")


if __name__ == "__main__":
    main()
