#!/usr/bin/python3
"""A model load's progress end to end (issue 25): status's loads while a load or swap runs, each
model's load figures after it, and what tandem prints of them. Run by e2e_test.py's main (one
CTest entry, daemon_e2e) with its Client, Daemon and arguments.
"""
import json, os, re, subprocess, threading

import e2e_test as e2e
from e2e_test import Client, Daemon, check


def tensor_bytes(path):
    """The bytes of the file's tensors by tandem-model info: what a CPU load reports placing."""
    r = subprocess.run([e2e.ARGS.tandem_model, "info", "--json", path], check=True, capture_output=True, timeout=60)
    return sum(b["bytes"] for b in json.loads(r.stdout)["bytes_by_type"])


def check_load_figures(load, want_bytes, what):
    check(isinstance(load, dict), "%s: no load figures: %r" % (what, load))
    check(load["bytes"] == want_bytes,
          "%s: %d bytes loaded, the file's tensors are %d" % (what, load["bytes"], want_bytes))
    check(load["seconds"] > 0, "%s: seconds %r" % (what, load))
    check(abs(load["bytes_per_second"] - load["bytes"] / load["seconds"]) <= 1e-6 * load["bytes_per_second"],
          "%s: rate %r" % (what, load))


def test_load_progress(model):
    """Loads and swaps in progress show in status (alias, op, path, done <= total: a CPU load of
    this 160 MB file takes some tens of ms, a poll well under one); after each, the model's load
    figures are the tensor bytes a CPU load reports, with its seconds and rate, the same in the
    reply and in status. tandem prints them, and draws no progress line when stderr is not a
    terminal."""
    big = big_model()
    d = Daemon([("default", model)])
    try:
        seen, stop = [], threading.Event()

        def poll():
            pc = Client(d.sock)
            rid = 10000
            while not stop.is_set():
                rid += 1
                seen.extend(pc.call({"id": rid, "op": "status"})["result"]["loads"])
            pc.close()

        t = threading.Thread(target=poll)
        t.start()
        c = Client(d.sock)
        try:
            loaded = c.call({"id": 1, "op": "load", "name": "big", "path": big})
            swapped = c.call({"id": 2, "op": "swap", "name": "big", "path": big})
        finally:
            stop.set()
            t.join()
        check("result" in loaded and "result" in swapped, "load, swap: %r %r" % (loaded, swapped))
        want = tensor_bytes(big)
        check_load_figures(loaded["result"]["model"].get("load"), want, "load reply")
        check_load_figures(swapped["result"]["model"].get("load"), want, "swap reply")
        for l in seen:
            check(l["name"] == "big" and l["op"] in ("load", "swap") and l["path"] == big, "load entry: %r" % l)
            check(l["total_bytes"] in (0, want) and l["done_bytes"] <= l["total_bytes"] and l["seconds"] >= 0,
                  "load entry figures: %r" % l)
        print("  %d status polls caught the load or swap in progress (%s)" %
              (len(seen), ", ".join(sorted(set(l["op"] for l in seen))) or "none"))
        # A poll takes well under a millisecond: one of them sees the total the engine announced.
        check(any(l["total_bytes"] == want for l in seen),
              "no poll saw a load in progress with its total: %r" % seen[-3:])
        st = c.call({"id": 3, "op": "status"})["result"]
        check(st["loads"] == [], "loads after the swap: %r" % st["loads"])
        models = {m["name"]: m for m in st["models"]}
        check(models["big"]["load"] == swapped["result"]["model"]["load"], "status keeps the swap's figures: %r" %
              models["big"])
        check_load_figures(models["default"].get("load"), tensor_bytes(model), "preloaded model")
        if e2e.ARGS.tandem:
            env = dict(os.environ, TANDEM_SOCKET=d.sock)
            for cmd, word in ((["load", "cli", big], "loaded"), (["swap", "cli", big], "swapped")):
                r = subprocess.run([e2e.ARGS.tandem] + cmd, env=env, capture_output=True, timeout=60)
                check(r.returncode == 0 and r.stderr == b"",
                      "tandem %s: no progress line off a terminal: %r" % (cmd, r))
                check(re.match(r"%s 'cli' in [0-9.]+ m?s \([0-9.]+ [kMGT]?B/s\): qwen3 on cpu, " % word,
                               r.stdout.decode()), "tandem %s: %r" % (cmd, r.stdout))
            r = subprocess.run([e2e.ARGS.tandem, "status"], env=env, capture_output=True, timeout=60)
            check(r.returncode == 0 and re.search(r"^  cli: loaded [0-9.]+ MB in [0-9.]+ m?s \([0-9.]+ [kMGT]?B/s\)$",
                                                  r.stdout.decode(), re.M), "tandem status: %r" % r.stdout)
    finally:
        check(d.stop() == 0, "tandemd exit status")


def big_model():
    """A model of about 160 MB (8 layers, 1024 wide): loads long enough that status can see them."""
    path = os.path.join(e2e.TMP, "big.gguf")
    if not os.path.exists(path):
        subprocess.run([e2e.ARGS.tandem_model, "make", "--preset", "tiny", "--n-layer", "8", "--n-embd", "1024",
                        "--n-ff", "2816", "--n-head", "8", "--n-head-kv", "4", "--seed", "2", "-q", "-o", path],
                       check=True, stdout=subprocess.DEVNULL)
    return path
