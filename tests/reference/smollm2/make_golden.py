#!/usr/bin/env python3
"""Shrinks a reference logits JSON ({"tokens", "logits"}: one row of n_vocab floats per position)
to golden data small enough to commit: per position the row's scale max|ref|, its top-16 ids and
every 128th id, with their values. tests/model_quality/logits_check.py checks tandem against it."""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("reference")
    ap.add_argument("out")
    ap.add_argument("--source", required=True, help="what produced the reference (recorded in the file)")
    a = ap.parse_args()
    ref = json.load(open(a.reference))
    rows = []
    for r in ref["logits"]:
        top = sorted(range(len(r)), key=lambda i: -r[i])[:16]
        ids = sorted(set(top) | set(range(0, len(r), 128)))
        rows.append({"scale": max(abs(x) for x in r), "argmax": top[0], "ids": ids,
                     "values": [round(r[i], 7) for i in ids]})
    with open(a.out, "w") as f:
        json.dump({"source": a.source, "tokens": ref["tokens"], "n_vocab": len(ref["logits"][0]),
                   "rows": rows}, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
