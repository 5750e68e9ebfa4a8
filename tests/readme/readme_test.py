#!/usr/bin/python3
"""README.md's "Using it" commands, run as a newcomer would after its "Installing" step: the programs
found on PATH by their installed names, on the default model (SmolLM2-135M-Instruct) and the CPU
backend. Every line of that code block must be in COMMANDS below, run there (sizes shrunk where a
line would take minutes on two cores) or skipped with the test that covers it instead; a README line
missing from the table, or a table entry no longer in the README, fails the test, so the two cannot
drift apart.

usage: readme_test.py --bin-dirs DIR[:DIR...]
Exit status: 0 pass, 1 failure, 77 skipped (the default model cannot be fetched).
"""
import argparse, os, re, shlex, shutil, signal, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))

# README command (its text before any '#' comment, whitespace collapsed) -> what runs: shell
# commands with {M} (the model), {SOCK} (a daemon serving it; also $TANDEM_SOCKET) and {TMP}; or
# ("skip", where it is tested). "daemon:" starts a tandemd that the later lines talk to.
COMMANDS = {
    "tandemd --socket /tmp/t.sock --model default=model.gguf [--gpu 0]":
        ["daemon: tandemd --config /dev/null --socket {SOCK} --model default={M}"],
    "tandemd ... --parallel 16 --context 4096":
        ["daemon2: tandemd --config /dev/null --socket {TMP}/p.sock --model default={M} --parallel 16 --context 4096",
         "tandem --socket {TMP}/p.sock run -n 8 'Hello'"],
    "tandemd ... --gpus 0=16GiB,1=32GiB [--ratios 1,1.75] [--split tensor]":
        ("skip", "needs two GPUs: the split tests (CTest label gpu) and scripts/gpu_split_run.sh"),
    "tandem --socket /tmp/t.sock run \"Why is the sky blue?\"":
        ["tandem --socket {SOCK} run -n 32 \"Why is the sky blue?\""],
    "tandem --socket /tmp/t.sock chat":
        ["printf 'Hello\\n' | tandem --socket {SOCK} chat -n 16"],
    "tandem ps | models | status | load NAME PATH | unload NAME | swap NAME PATH | tokenize":
        ["tandem ps", "tandem models", "tandem status", "tandem load second {M}", "tandem swap second {M}",
         "tandem unload second", "tandem tokenize 'Hello world'"],
    "tandem loadgen -c 8 -r 64 -n 128":
        ["tandem loadgen -c 2 -r 4 -n 16"],
    "tandem-model info model.gguf [--tensors]":
        ["tandem-model info {M}", "tandem-model info {M} --tensors"],
    "tandem-model run -m model.gguf -p \"Hello\" --chat":
        ["tandem-model run -m {M} -p \"Hello\" --chat -n 16"],
    "tandem-model quantize model.gguf f16.gguf F16":
        ["tandem-model quantize {M} {TMP}/f16.gguf F16"],
    "tandem-model quantize f16.gguf q4km.gguf Q4_K_M":
        ["tandem-model quantize {TMP}/f16.gguf {TMP}/q4km.gguf Q4_K_M", "tandem-model info {TMP}/q4km.gguf"],
    "tandem-model import hf-dir -o model.gguf":
        ("skip", "needs a Hugging Face checkpoint: tests/engine/convert (hf_import tests, and transformers "
                 "parity on the GPU machine)"),
    "tandem-model bench -m model.gguf -p 512,2048 -n 128":
        ["tandem-model bench -m {M} -p 64 -n 16 -r 1 --device -1"],
    "tandem-model plan -m model.gguf --devices 16GiB,32GiB --ctx 8192":
        ["tandem-model plan -m {M} --devices 16GiB,32GiB --ctx 8192"],
}


def readme_commands():
    """The commands of the first ```sh block under '## Using it'."""
    text = open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8").read()
    section = text.split("\n## Using it", 1)
    if len(section) < 2:
        raise SystemExit("FAIL: README.md has no '## Using it' section")
    block = re.search(r"```sh\n(.*?)```", section[1], re.S)
    if not block:
        raise SystemExit("FAIL: README.md's 'Using it' has no ```sh block")
    out = []
    for line in block.group(1).splitlines():
        cmd = " ".join(line.split("#", 1)[0].split())
        if cmd:
            out.append(cmd)
    return out


def find_model():
    env = os.environ.get("TANDEM_SMOLLM2_GGUF")
    if env:
        if not os.path.isfile(env):
            raise SystemExit("FAIL: TANDEM_SMOLLM2_GGUF=%s is not a file" % env)
        return env
    r = subprocess.run(["bash", os.path.join(SOURCE_DIR, "scripts", "fetch_model.sh")], stdout=subprocess.PIPE,
                       text=True)
    path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not os.path.isfile(path):
        print("SKIP: could not fetch the default model with scripts/fetch_model.sh (no network?); "
              "set TANDEM_SMOLLM2_GGUF=FILE.gguf")
        sys.exit(77)
    return path


class daemons:
    def __init__(self, env):
        self.env, self.procs = env, []

    def start(self, cmd, sock, log):
        p = subprocess.Popen(["bash", "-c", "exec " + cmd], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        deadline = time.time() + 120
        while time.time() < deadline:
            if p.poll() is not None:
                return "exited with status %d before serving" % p.returncode
            r = subprocess.run(["tandem", "--socket", sock, "--json", "models"], env=self.env,
                               capture_output=True, text=True)
            if r.returncode == 0 and '"resident"' in r.stdout:
                return None
            time.sleep(0.2)
        return "not serving after 120 s"

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dirs", required=True, help="directories of tandemd, tandem and tandem-model")
    args = ap.parse_args()

    readme = readme_commands()
    missing = [c for c in readme if c not in COMMANDS]
    stale = [c for c in COMMANDS if c not in readme]
    if missing or stale:
        for c in missing:
            print("FAIL: README line not in readme_test.py's COMMANDS (add how to run it): %s" % c)
        for c in stale:
            print("FAIL: readme_test.py's COMMANDS has a line README no longer shows: %s" % c)
        return 1

    model = find_model()
    tmp = tempfile.mkdtemp(prefix="tandem-readme-")
    sock = os.path.join(tmp, "t.sock")
    env = dict(os.environ, PATH=args.bin_dirs + os.pathsep + os.environ.get("PATH", ""), TANDEM_SOCKET=sock)
    log_path = os.path.join(tmp, "tandemd.log")
    log = open(log_path, "w")
    ds = daemons(env)
    failures, t0 = 0, time.time()
    try:
        for line in readme:
            todo = COMMANDS[line]
            if isinstance(todo, tuple):
                print("skip  %s\n      (%s)" % (line, todo[1]))
                continue
            for cmd in todo:
                cmd = cmd.format(M=shlex.quote(model), SOCK=shlex.quote(sock), TMP=tmp)
                start = time.time()
                if cmd.startswith("daemon"):
                    kind, cmd = cmd.split(": ", 1)
                    target = sock if kind == "daemon" else os.path.join(tmp, "p.sock")
                    why = ds.start(cmd, target, log)
                    ok, out = why is None, why or ""
                else:
                    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=env, capture_output=True,
                                       text=True, timeout=600)
                    # Every line says something (quantize only on stderr): silence is a failure too.
                    said = (r.stdout + r.stderr).strip()
                    ok, out = r.returncode == 0 and said != "", said[-1500:] or "no output"
                print("%s  %-70s %5.1f s" % ("ok  " if ok else "FAIL", cmd[:70], time.time() - start))
                if not ok:
                    failures += 1
                    print("      README line: %s\n      %s" % (line, out.replace("\n", "\n      ")))
    finally:
        ds.stop()
        log.close()
    if failures:
        print("tandemd's log: %s (and the other files in its directory)" % log_path)
    else:
        shutil.rmtree(tmp, ignore_errors=True)  # the F16 and Q4_K_M copies: about 350 MB
    print("%d of %d README lines failed; %.0f s in all" % (min(failures, len(readme)), len(readme), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
