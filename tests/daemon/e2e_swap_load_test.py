#!/usr/bin/python3
"""Swaps under heavy streaming load and a burst of clients at the default queue depth (issue 25's
CPU cases; scripts/gpu_swap_run.sh is the same on a GPU with 8B files): the real `tandem loadgen`
drives the clients. Run by e2e_test.py's main (one CTest entry, daemon_e2e) with its Client,
Daemon and arguments.
"""
import json, os, subprocess, threading, time

import e2e_test as e2e
from e2e_test import Client, Daemon, check, make_model


def loadgen(d, *args, timeout=300):
    """`tandem --json loadgen ARGS` against d: (exit status, its summary or None, stderr)."""
    env = dict(os.environ, TANDEM_SOCKET=d.sock)
    r = subprocess.run([e2e.ARGS.tandem, "--json", "loadgen", "--raw", *args], env=env, capture_output=True,
                       timeout=timeout)
    lines = r.stdout.decode().strip().splitlines()
    return r.returncode, json.loads(lines[-1]) if lines else None, r.stderr.decode()


def test_swaps_under_32_streaming_clients(model):
    """32 clients stream for a while (loadgen --duration) while the alias is swapped between two
    files every 0.5 s: every request and every swap succeeds."""
    if not e2e.ARGS.tandem:
        print("  (skipped: no --tandem)")
        return
    other = make_model("tiny_b.gguf", 7)
    d = Daemon([("default", model)])
    seconds = 10
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(
            zip(("rc", "summary", "stderr"), loadgen(d, "-c", "32", "--duration", str(seconds), "-n", "6"))))
        t.start()
        admin = Client(d.sock)
        swaps, paths = 0, [other, model]
        t0 = time.time()
        while t.is_alive() and time.time() - t0 < seconds:
            time.sleep(0.5)
            r = admin.call({"id": 100 + swaps, "op": "swap", "name": "default", "path": paths[swaps % 2]})
            check("result" in r, "swap %d under load: %r" % (swaps, r))
            swaps += 1
        t.join(300)
        j = result.get("summary")
        check(result.get("rc") == 0 and j is not None, "loadgen under swaps: %r" % result)
        check(j["clients"] == 32 and j["failures"] == 0 and j["requests"] >= 32, "loadgen summary: %r" % j)
        check(j["wall_seconds"] >= seconds, "--duration %d s ended after %.2f s" % (seconds, j["wall_seconds"]))
        check(swaps >= 10, "only %d swaps in %d s" % (swaps, seconds))
        m = admin.call({"id": 999, "op": "models"})["result"]["models"][0]
        check(m["swaps"] == swaps, "swaps counted: %r (made %d)" % (m, swaps))
        print("  %d requests by 32 clients, %d swaps, 0 failed" % (j["requests"], swaps))
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_burst_of_24_clients_is_not_busy(model):
    """24 clients at once against the default queue depth and sequence slots: each is served (a
    burst waits; `busy` is for overload only)."""
    if not e2e.ARGS.tandem:
        print("  (skipped: no --tandem)")
        return
    d = Daemon([("default", model)])
    try:
        rc, j, err = loadgen(d, "-c", "24", "-r", "24", "-n", "4")
        check(rc == 0 and j and j["failures"] == 0 and j["requests"] == 24, "burst of 24: %r %r %r" % (rc, j, err))
        # --duration with -r: whichever comes first; a negative duration is a usage error.
        rc, j, _ = loadgen(d, "-c", "2", "-r", "3", "--duration", "600", "-n", "2")
        check(rc == 0 and j["requests"] == 3, "-r before --duration: %r %r" % (rc, j))
        rc, _, err = loadgen(d, "--duration", "-1")
        check(rc == 2 and "duration" in err, "--duration -1: %r %r" % (rc, err))
    finally:
        check(d.stop() == 0, "tandemd exit status")
