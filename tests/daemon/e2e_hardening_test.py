#!/usr/bin/python3
"""tandemd's hardening cases end to end (issue 24): connection, frame, idle and buffer limits, fd
exhaustion, a model file changed under the daemon, GPUs not ready at start, systemd notify and
socket activation, journald-only log prefixes, the watchdog and exit statuses. Run by e2e_test.py's
main (one CTest entry, daemon_e2e) with its Client, Daemon and arguments.
"""
import os, signal, socket, struct, subprocess, time

import e2e_test as e2e
from e2e_test import Client, Daemon, check, generate, long_prompt


def raw_socket(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(d.sock)
    return s


def refused_busy(d, what):
    """The next connection gets one `busy` frame naming the limit, then EOF."""
    c = Client(d.sock)
    try:
        r = c.recv()
        check(r.get("error", {}).get("code") == "busy" and what in r["error"]["message"], "refusal: %r" % r)
        check(c.s.recv(1) == b"", "refused connection left open")
    finally:
        c.close()


def test_connection_limits(model):
    """Past max-connections-per-user, then max-connections, a new client gets `busy` and is closed;
    the connected ones keep being served; a closed one frees its place."""
    d = Daemon([("default", model)], extra=["--max-connections", "4", "--max-connections-per-user", "3"])
    try:
        held = [raw_socket(d) for _ in range(2)]
        c = Client(d.sock)  # the third of this uid
        time.sleep(0.2)
        refused_busy(d, "max-connections-per-user 3")
        _, final = generate(c, 1, n=2, stream=False)
        check("result" in final, "a connected client after a refusal: %r" % final)
        held.pop().close()
        time.sleep(0.2)
        c2 = Client(d.sock)
        check("result" in c2.call({"id": 2, "op": "models"}), "a freed place")
        for x in held + [c.s, c2.s]:
            x.close()
    finally:
        check(d.stop() == 0, "tandemd exit status")
    d = Daemon([("default", model)], extra=["--max-connections", "2"])
    try:
        held = [raw_socket(d) for _ in range(2)]
        time.sleep(0.2)
        refused_busy(d, "max-connections 2")
        for x in held:
            x.close()
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_frame_and_idle_timeouts(model):
    """A frame left incomplete gets bad_frame and a close after frame-timeout; a silent connection
    is closed after idle-timeout; a client that keeps talking is not."""
    d = Daemon([("default", model)], extra=["--frame-timeout", "1", "--idle-timeout", "2"])
    try:
        partial = Client(d.sock)
        partial.send_raw(struct.pack(">I", 1000) + b"x" * 10)
        silent = raw_socket(d)
        talker = Client(d.sock)
        t0 = time.time()
        r = partial.recv()
        check(r.get("error", {}).get("code") == "bad_frame", "partial frame: %r" % r)
        check(0.8 < time.time() - t0 < 4, "frame timeout after %.1f s" % (time.time() - t0))
        check(partial.s.recv(1) == b"", "partial connection left open")
        for i in range(6):  # 3 s of requests every 0.5 s: never idle for 2 s
            check("result" in talker.call({"id": 10 + i, "op": "models"}), "talker %d" % i)
            time.sleep(0.5)
        check(silent.recv(1) == b"", "silent connection left open")
        check("result" in talker.call({"id": 20, "op": "models"}), "talker after the others closed")
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_buffered_frames_bound(model):
    """Partly received frames over all connections are bounded: the connection that passes
    max-buffered gets `busy` and is closed; the others and new clients are served."""
    d = Daemon([("default", model)], extra=["--max-buffered", "65536"])
    try:
        a, b = Client(d.sock), Client(d.sock)
        a.send_raw(struct.pack(">I", 60000) + b"\x80" * 40000)
        time.sleep(0.2)
        b.send_raw(struct.pack(">I", 60000) + b"\x80" * 40000)
        r = b.recv()
        check(r.get("error", {}).get("code") == "busy", "over max-buffered: %r" % r)
        c = Client(d.sock)
        check("result" in c.call({"id": 1, "op": "models"}), "a new client")
        a.send_raw(b"\x80" * 20000)  # completes a's frame: a bad request, framing intact
        r = a.recv()
        check(r.get("error", {}).get("code") in ("bad_request", "bad_frame"), "a's frame: %r" % r)
        check("result" in a.call({"id": 2, "op": "models"}), "a after its frame")
    finally:
        check(d.stop() == 0, "tandemd exit status")


def proc_cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_fd_exhaustion_backs_off(model):
    """Out of file descriptors (a hard limit of 64), accept pauses instead of spinning: little CPU,
    a bounded log; once clients leave, new ones are served."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    log_path = os.path.join(e2e.TMP, "tandemd.log")
    log_before = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    d = Daemon([("default", model)], preexec=limit)
    try:
        held = []
        for _ in range(80):  # past the daemon's descriptors: the rest wait in the backlog
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(d.sock)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                s.close()
                break
            held.append(s)
        time.sleep(0.5)
        cpu0 = proc_cpu_seconds(d.p.pid)
        time.sleep(2)
        used = proc_cpu_seconds(d.p.pid) - cpu0
        check(used < 0.5, "tandemd used %.2f s of CPU in 2 s out of descriptors" % used)
        with open(log_path, "rb") as f:
            f.seek(log_before)
            lines = f.read().count(b"accept:")
        check(1 <= lines <= 5, "accept warnings logged: %d" % lines)
        for s in held:
            s.close()
        time.sleep(0.5)
        c = Client(d.sock)
        check("result" in c.call({"id": 1, "op": "models"}), "served after the descriptors came back")
        c.close()
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_model_file_changed_under_the_daemon(model):
    """A resident model's file truncated under it: the request gets an error naming the change
    (no SIGBUS), the model is unloaded, a request with the file still broken fails to load it,
    and once the file is back the next request loads it again and generates."""
    import shutil
    path = os.path.join(e2e.TMP, "changing.gguf")
    shutil.copyfile(model, path)
    d = Daemon([("default", path)])
    try:
        c = Client(d.sock)
        _, final = generate(c, 1, n=2, stream=False)
        check("result" in final, "before: %r" % final)
        os.truncate(path, 4096)
        _, final = generate(c, 2, n=2, stream=False)
        check("changed on disk" in final.get("error", {}).get("message", ""), "truncated: %r" % final)
        check(d.p.poll() is None, "tandemd died")
        deadline = time.time() + 5
        while time.time() < deadline:
            state = c.call({"id": 3, "op": "models"})["result"]["models"][0]["state"]
            if state == "unloaded":
                break
            time.sleep(0.1)
        check(state == "unloaded", "state after the change: %r" % state)
        _, final = generate(c, 4, n=2, stream=False)
        check("error" in final, "a broken file loaded: %r" % final)
        shutil.copyfile(model, path + ".new")
        os.rename(path + ".new", path)
        _, final = generate(c, 5, n=2, stream=False)
        check("result" in final, "after the file came back: %r" % final)
        c.close()
    finally:
        check(d.stop() == 0, "tandemd exit status")


def test_gpu_not_ready_at_start(model):
    """A configured GPU that the driver does not show (device 7 on this machine): tandemd waits
    gpu-wait seconds without READY=1, says which GPU, and exits with status 1 for systemd to retry."""
    ns_path = os.path.join(e2e.TMP, "gpuwait.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(ns_path)
    ns.settimeout(0.1)
    log_path = os.path.join(e2e.TMP, "tandemd.log")
    log_before = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    env = dict(os.environ, NOTIFY_SOCKET=ns_path)
    t0 = time.time()
    d = Daemon([("default", model)], env=env, wait=False, extra=["--gpu", "7", "--gpu-wait", "1"])
    msgs = []
    try:
        while d.p.poll() is None and time.time() - t0 < 30:
            try:
                msgs.extend(ns.recv(4096).decode().split("\n"))
            except socket.timeout:
                pass
        check(d.p.poll() == 1, "exit status %r" % d.p.poll())
        check(time.time() - t0 >= 0.9, "gave up after %.2f s" % (time.time() - t0))
        check(not any(m.startswith("READY=1") for m in msgs), "READY sent: %r" % msgs)
        check(any("waiting for GPU 7" in m for m in msgs), "no waiting STATUS: %r" % msgs)
        with open(log_path, "rb") as f:
            f.seek(log_before)
            check(b"GPU 7 not ready" in f.read(), "no log line naming GPU 7")
    finally:
        d.p.wait(timeout=30)
        d.log.close()
        ns.close()


def test_systemd_notify(model):
    ns_path = os.path.join(e2e.TMP, "notify.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(ns_path)
    ns.settimeout(60)
    env = dict(os.environ, NOTIFY_SOCKET=ns_path)
    d = Daemon([("default", model)], env=env, wait=False)
    msgs = []

    def until(prefix):
        while True:
            m = ns.recv(4096).decode()
            msgs.extend(m.split("\n"))
            if any(x.startswith(prefix) for x in m.split("\n")):
                return

    try:
        until("READY=1")
        check(any(m.startswith("STATUS=loading default") for m in msgs), "no loading STATUS: %r" % msgs)
        # READY comes only once the model is resident and the socket listens.
        c = Client(d.sock)
        check(c.call({"id": 1, "op": "models"})["result"]["models"][0]["state"] == "resident", "not resident")
        c.close()
        d.p.send_signal(signal.SIGHUP)
        until("READY=1")
        check("RELOADING=1" in msgs, "SIGHUP: %r" % msgs)
        d.p.send_signal(signal.SIGTERM)
        until("STOPPING=1")
    finally:
        check(d.stop() == 0, "tandemd exit status")
        ns.close()


def test_socket_activation(model):
    path = os.path.join(e2e.TMP, "activated.sock")
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path)
    ls.listen(16)
    fd = ls.fileno()

    def as_fd3():
        os.dup2(fd, 3)

    env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="tandemd.socket")
    bogus = os.path.join(e2e.TMP, "not-used.sock")
    # LISTEN_PID must be tandemd's pid: the shell sets it to its own and then execs tandemd.
    wrapper = ["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$0" "$@"']
    d = Daemon([("default", model)], env=env, socket_path=bogus, pass_fds=(fd, 3), preexec=as_fd3, wait=False,
               wrapper=wrapper)
    d.sock = path
    try:
        d.wait_ready()
        c = Client(path)
        _, final = generate(c, 1, n=3)
        check("result" in final, "activated socket: %r" % final)
        check(not os.path.exists(bogus), "bound its own socket despite activation")
    finally:
        check(d.stop() == 0, "tandemd exit status")
        ls.close()


def test_log_prefixes_only_under_journald(model):
    """sd-daemon priority prefixes ("<6>") only when journald reads stderr (JOURNAL_STREAM)."""
    for env_extra, want in (({}, False), ({"JOURNAL_STREAM": "8:1234"}, True)):
        d = Daemon([("m", model)], env=dict(os.environ, **env_extra))
        lines = []
        try:
            with open(os.path.join(e2e.TMP, "tandemd.log"), "rb") as f:
                lines = [l for l in f.read().decode(errors="replace").splitlines() if "listening on " + d.sock in l]
        finally:
            check(d.stop() == 0, "tandemd exit status")
        check(lines and all(l.startswith("<6>") == want for l in lines), "JOURNAL_STREAM %r: %r" % (env_extra, lines))


def test_watchdog_follows_engine_health(model):
    ns_path = os.path.join(e2e.TMP, "watchdog.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(ns_path)
    ns.settimeout(0.05)
    env = dict(os.environ, NOTIFY_SOCKET=ns_path, WATCHDOG_USEC="400000")
    # The whole prompt in one forward pass, and a stall limit far below that pass's time.
    d = Daemon([("default", model)], env=env, extra=["--prefill-chunk", "4096", "--stall-timeout", "0.05"])
    pings = []

    def drain(seconds):
        end = time.time() + seconds
        while time.time() < end:
            try:
                for m in ns.recv(4096).decode().split("\n"):
                    if m == "WATCHDOG=1":
                        pings.append(time.time())
            except socket.timeout:
                pass

    try:
        drain(1.0)
        check(len(pings) >= 2, "no WATCHDOG=1 while idle: %r" % pings)
        c = Client(d.sock)
        prompt = long_prompt(c, 1900)
        c.send({"id": 1, "op": "generate", "prompt": prompt, "max_tokens": 1, "stream": False})
        c.s.settimeout(0.05)
        t0 = time.time()
        final = None
        while final is None:
            drain(0.05)
            try:
                final = c.recv()
            except socket.timeout:
                pass
        t1 = time.time()
        c.s.settimeout(60)
        drain(1.0)
        check(pings and pings[-1] > t1, "no WATCHDOG=1 after the long pass ended: %r" % pings)
        prefill = final["result"]["prefill_seconds"]
        print("  one %.2fs forward pass (%.2fs from the request)" % (prefill, t1 - t0))
        # While healthy the daemon pings every 0.2 s; during the pass it must fall silent for about
        # the pass's length. Measured as the longest gap between pings around the request, which
        # a late read of a ping or a late reply (a loaded CI machine) shifts but does not close;
        # 0.6 s of margin for the limit (0.05 s), one tick and such delays.
        if prefill > 1.0:
            around = sorted(p for p in pings if t0 - 1.0 < p < t1 + 1.0)
            gap = max((b - a for a, b in zip(around, around[1:])), default=0.0)
            check(gap >= prefill - 0.6, "WATCHDOG=1 kept coming during a %.2fs stalled pass (longest "
                  "silence %.2fs): %r" % (prefill, gap, around))
            with open(os.path.join(e2e.TMP, "tandemd.log"), "rb") as f:
                check(b"withholding the watchdog ping" in f.read(), "no log line for the withheld ping")
    finally:
        check(d.stop() == 0, "tandemd exit status")
        ns.close()


def test_exit_statuses(model):
    def run(*args):
        return subprocess.run([e2e.ARGS.tandemd] + list(args), capture_output=True, timeout=30)

    for args in (["--no-such-flag"], ["--config", os.devnull, "--queue-depth", "0"],
                 ["--config", os.devnull, "--memory-budget", "lots"], ["--config", os.devnull, "--model", "x"],
                 ["--config", os.path.join(e2e.TMP, "missing.toml")]):
        r = run(*args)
        check(r.returncode == 2 and r.stderr, "usage error %r: %r" % (args, r))
    r = run("--help")
    check(r.returncode == 0 and b"--memory-budget" in r.stdout, "--help: %r" % (r,))
    r = run("--config", os.devnull, "--socket", os.path.join(e2e.TMP, "no", "such", "dir.sock"))
    check(r.returncode == 1 and b"bind" in r.stderr, "runtime failure: %r" % (r,))
