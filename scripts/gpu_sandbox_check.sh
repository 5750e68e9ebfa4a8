#!/usr/bin/env bash
# On the GPU machine (no systemd there): does CUDA work under the system-call policy of
# packaging/tandemd.service? Runs a tiny random model's greedy generation on GPU 0 with
# tandem-model, then through tandemd and tandem, each inside scripts/sandbox_exec.cpp's sandbox
# (no_new_privs, SystemCallFilter=@system-service with EPERM, AF_UNIX sockets only, a private
# network namespace where allowed), and compares the text with the same run outside it. The
# sandbox names every system call it denied. Filesystem protections (ProtectSystem=, PrivateTmp=,
# ...) are not emulated.
# Usage (repo root): here, where systemd-analyze and libseccomp-dev are, `bash
# scripts/gpu_sandbox_check.sh --prepare` builds SANDBOX/sandbox_exec and writes the unit's
# @system-service set, flattened, to SANDBOX/system-service.syscalls; then on the GPU machine,
# with SANDBOX carried: BUILD_DIR=build-gpu bash scripts/gpu_sandbox_check.sh. Env: SANDBOX (.h200),
# GPU (0; -1: the CPU backend, to try the script anywhere).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu} box=${SANDBOX:-.h200} gpu=${GPU:-0}
want=cuda; [[ $gpu -lt 0 ]] && want=cpu
if [[ ${1:-} == --prepare ]]; then
  mkdir -p "$box"
  g++ -O2 -std=c++17 -Wall scripts/sandbox_exec.cpp -l:libseccomp.a -o "$box/sandbox_exec" || exit 1
  # @system-service names groups (@basic-io, ...) and calls; the groups are expanded in turn.
  python3 - "$box/system-service.syscalls" <<'PY' || exit 1
import subprocess, sys
seen, calls, todo = set(), set(), ["@system-service"]
while todo:
    g = todo.pop()
    if g in seen:
        continue
    seen.add(g)
    out = subprocess.run(["systemd-analyze", "syscall-filter", g], check=True, capture_output=True, text=True)
    for t in (line.strip() for line in out.stdout.splitlines()[1:]):
        if t and not t.startswith("#"):
            (todo.append(t) if t.startswith("@") else calls.add(t))
open(sys.argv[1], "w").write("\n".join(sorted(calls)) + "\n")
print("%d calls from %d groups (systemd-analyze %s)" % (len(calls), len(seen), subprocess.run(
    ["systemd-analyze", "--version"], capture_output=True, text=True).stdout.split()[1]))
PY
  exit 0
fi
run_name=sandbox
source scripts/daemon_run.sh
sx=$box/sandbox_exec list=$box/system-service.syscalls
need_files "$tm" "$td" "$tc" "$sx" "$list"
netns=--netns
"$sx" --netns "$list" /bin/true 2>/dev/null || { netns=; echo "(no network namespace here: PrivateNetwork= not emulated)"; }
"$tm" make --preset tiny --type Q8_0 --seed 7 -q -o "$work/tiny.gguf" || exit 1
args=(run -m "$work/tiny.gguf" -p "the quick brown fox" -n 32 --temp 0 --gpu "$gpu")
plain=$("$tm" "${args[@]}" 2>/dev/null)
boxed=$("$sx" $netns "$list" "$tm" "${args[@]}" 2>"$work/tm.err")
grep '^sandbox_exec: denied' "$work/tm.err" | sort -u
fail=0
if [[ -n $plain && $plain == "$boxed" ]]; then echo "tandem-model ($want) in the sandbox: same 32 tokens: PASS"
else echo "tandem-model in the sandbox: FAIL"; tail -5 "$work/tm.err"; fail=1; fi

"$sx" $netns "$list" "$td" --socket "$sock" --config /dev/null --gpu "$gpu" --model "default=$work/tiny.gguf" \
  2>"$work/td.err" &
pids+=($!)
wait_resident 30
served=$("$tc" --socket "$sock" run --raw --temp 0 -n 32 "the quick brown fox" 2>&1)
backend=$("$tc" --socket "$sock" --json models 2>&1)
kill "${pids[0]}"; wait "${pids[0]}"; rc=$?
pids=()
grep '^sandbox_exec: denied' "$work/td.err" | sort -u
if [[ $backend == *\"$want\"* && -n $served ]]; then echo "tandemd ($want) in the sandbox served: PASS (exit status $rc after SIGTERM)"
else echo "tandemd in the sandbox: FAIL"; echo "$served"; tail -5 "$work/td.err"; fail=1; fi
exit $fail
