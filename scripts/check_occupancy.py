#!/usr/bin/env python3
"""Occupancy guard for the decode kernels (and prefill attention's): compiles kernels/matvec.cu, layer_ops.cu,
attention.cu, attention_deep.cu, delta_net.cu, delta_net_chunked.cu, moe.cu, moe_matvec.cu, moe_route.cu, moe_gemm.cu, qgemm.cu, qgemm_frag.cu and flash_attention_mma.cu
for sm_90a (what sm_90 GPUs run) with ptxas's resource report and fails if any kernel now fits fewer blocks per SM than
tests/kernels/occupancy_budget.txt records, or keeps more of its locals in a stack frame (local memory: a
register array indexed by a loop variable lands there, and the grouped decode kernel lost ~25% of its
speed that way once while its register count looked unchanged). Decode speed follows the blocks in flight per SM,
and a register count can jump with an innocent-looking change (a member added to the mat-vec's
parameter struct once took Q4_K's decode kernel from 93 to 120 registers, five blocks per SM to
four, and 32B decode from 110 to 92 t/s) that no functional test sees.

Every kernel family those files compile must be named in THREADS (tracked, with its threads per block) or
UNTRACKED, else the guard fails: a family missing from THREADS used to be skipped without a word.

Usage: scripts/check_occupancy.py [--update] [--nvcc PATH]
  --update  rewrite the budget from this compile (after a change that is meant to move it)."""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET = os.path.join(ROOT, "tests", "kernels", "occupancy_budget.txt")
SOURCES = ["kernels/matvec.cu", "kernels/layer_ops.cu", "kernels/attention.cu", "kernels/attention_deep.cu",
           "kernels/delta_net.cu", "kernels/delta_net_chunked.cu", "kernels/moe.cu", "kernels/moe_matvec.cu", "kernels/moe_route.cu", "kernels/moe_gemm.cu", "kernels/qgemm.cu", "kernels/qgemm_frag.cu",
           "kernels/flash_attention_mma.cu"]
REGS_PER_SM, MAX_BLOCKS, WARP_ALLOC = 65536, 32, 256  # sm_90


def blocks_per_sm(regs, threads):
    """Resident blocks by registers alone (allocated per warp in units of 256)."""
    per_warp = -(-regs * 32 // WARP_ALLOC) * WARP_ALLOC
    warps = -(-threads // 32)
    return min(MAX_BLOCKS, REGS_PER_SM // (per_warp * warps))


# Threads per block of each kernel family (the launchers' constants; the mat-vec's is the product
# of its last two integer template arguments).
THREADS = {"matvec_kernel": None, "rms_norm_wide_kernel": 256, "paged_attention_kernel": 128,
           "paged_deep_kernel": 128, "flash_mma_kernel": 128,
           "qk_rope_store_kernel": 128, "dn_rule_kernel": 128, "dn_conv_kernel": 128,
           "moe_matvec_kernel": 128, "moe_down_combine_kernel": 128, "moe_router_norm_kernel": 256, "moe_gemm_kernel": 256, "moe_route_kernel": 128, "qgemm_kernel": 256,
           "qgemm_grouped_kernel": 256, "qgemm_frag_kernel": None,
           "qgemm_frag_grouped_kernel": 256,
           "dn_chunk_prep_kernel": 256, "dn_chunk_prep_mma_kernel": 256,
           "dn_chunk_state_kernel": 128, "dn_rule_decode_kernel": 256, "moe_combine_norm_kernel": 256,
           "dn_chunk_state_mma_kernel": 256, "moe_matvec_swiglu_kernel": None}


def threads_of(key):
    """Threads per block of a kernel key: for the mat-vec TB times its warps per block, else THREADS."""
    family = key.split("<")[0]
    if family == "matvec_kernel":  # <Q, NT, R, TB, Pairs, warps per block>: TB * warps
        nums = re.findall(r"Li(\d+)E", key)
        return int(nums[-2]) * int(nums[-1])
    if family == "moe_matvec_swiglu_kernel":  # <Q, SW>: swiglu_shape (kernels/moe_matvec.cu), 128 at SW 8
        return 128 if int(re.findall(r"Li(\d+)E", key)[-1]) == 8 else 256
    if family == "qgemm_frag_kernel":  # <decoder, W, NT8>: W warps (kernels/qgemm_frag.cu)
        return 32 * int(re.findall(r"Li(\d+)E", key)[-2])
    return THREADS[family]


# Kernel families of SOURCES the guard leaves out on purpose: elementwise, gather and one-block
# kernels whose speed does not follow their blocks per SM. Every family in SOURCES is in THREADS
# or here, so that a new kernel cannot be left out of the guard by forgetting its table entry.
UNTRACKED = {"moe_hist_kernel", "moe_scan_kernel", "moe_scatter_kernel", "moe_swiglu_q8_kernel",
             "moe_quantize_x_kernel", "moe_combine_kernel", "quantize_x_kernel", "quantize_x2_kernel",
             "qgemm_sum_kernel", "sigmoid_mul_kernel", "split_q_gate_kernel", "rms_norm_gated_kernel",
             "store_kv_kernel", "store_kv_q8_0_kernel", "store_kv_q8_0_rows_kernel", "to_f16_kernel", "add_kernel",
             "rope_kernel", "argmax_kernel", "swiglu_kernel", "add_bias_kernel", "get_rows_kernel",
             "rms_norm_kernel", "swiglu_q8_kernel", "rope_table_kernel", "gather_rows_kernel",
             "rms_norm_q8_kernel", "mma_tile_test_kernel"}


def family(demangled):
    """The kernel's own name from a demangled signature: 'void ns::f<T, 4>(args)' -> 'f'."""
    depth, end = 0, len(demangled)
    for i, c in enumerate(demangled):
        depth += c == "<"
        depth -= c == ">"
        if c == "(" and depth == 0:
            end = i
            break
    head, depth, name = demangled[:end], 0, ""
    for c in head:  # drop template arguments
        depth += c == "<"
        if depth == 0:
            name += c
        depth -= c == ">"
    return name.split("::")[-1].split()[-1]


def entry_families(nvcc, report):
    """The families of every kernel a ptxas report compiled (demangled by cu++filt beside nvcc)."""
    mangled = re.findall(r"Compiling entry function '([^']+)'", report)
    beside = os.path.join(os.path.dirname(shutil.which(nvcc) or nvcc), "cu++filt")
    filt = beside if os.path.exists(beside) else shutil.which("cu++filt")
    if not filt:
        print("check_occupancy: no cu++filt beside nvcc or on PATH: kernel families not checked")
        return set()
    out = subprocess.run([filt], input="\n".join(mangled), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("check_occupancy: cu++filt failed:\n%s" % out.stderr[-2000:])
    return {family(line) for line in out.stdout.splitlines() if line.strip()}


def compile_report(nvcc, src):
    cmd = [nvcc, "-O3", "-gencode", "arch=compute_90a,code=sm_90a", "-std=c++17", "-I" + ROOT, "-I" + os.path.join(ROOT, "engine"),
           "--resource-usage", "-c", os.path.join(ROOT, src), "-o", os.devnull]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("check_occupancy: compile of %s failed:\n%s" % (src, out.stderr[-4000:]))
    return out.stdout + out.stderr


def kernels(report):
    """{kernel key: (registers, stack frame bytes)} for the kernel families in THREADS."""
    found, name, stack = {}, None, 0
    for line in report.splitlines():
        names = "|".join(THREADS)
        # A template kernel (void, so its arguments end in "EEv"), or a plain one.
        m = re.search(r"Compiling entry function '\S*?\d(%s)I(.*?)EEv" % names, line) or \
            re.search(r"Compiling entry function '\S*?\d(%s)E()" % names, line)
        if m:
            name, stack = m.group(1) + "<" + m.group(2) + ">", 0
            continue
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and name:
            stack = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            found[name] = (int(m.group(1)), stack)
            name = None
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--nvcc", default="nvcc")
    a = ap.parse_args()
    regs, unknown = {}, set()
    for src in SOURCES:
        report = compile_report(a.nvcc, src)
        regs.update(kernels(report))
        unknown |= {f + " (" + src + ")" for f in entry_families(a.nvcc, report) - set(THREADS) - UNTRACKED}
    if not regs:
        sys.exit("check_occupancy: no kernels found in the ptxas report")
    if unknown:
        sys.exit("check_occupancy: kernel families in neither THREADS nor UNTRACKED (say which, with its "
                 "threads per block): " + ", ".join(sorted(unknown)))
    now = {k: (blocks_per_sm(r, threads_of(k)), r, st) for k, (r, st) in regs.items()}
    if a.update:
        with open(BUDGET, "w") as f:
            f.write("# Blocks per SM (sm_90, by registers), registers and stack frame bytes of each kernel, from\n"
                    "# scripts/check_occupancy.py --update. CI fails when a kernel fits fewer blocks or its stack grows.\n")
            for k in sorted(now):
                f.write("%s %d %d %d\n" % (k, now[k][0], now[k][1], now[k][2]))
        print("check_occupancy: wrote %d kernels to %s" % (len(now), os.path.relpath(BUDGET, ROOT)))
        return 0
    budget = {}
    for line in open(BUDGET):
        if line.strip() and not line.startswith("#"):
            k, blocks, r, st = line.split()
            budget[k] = (int(blocks), int(r), int(st))
    bad = []
    for k, (blocks, r, st) in sorted(budget.items()):
        if k not in now:
            bad.append("%s: in the budget but not compiled any more (run --update if it was removed)" % k)
        elif now[k][0] < blocks:
            bad.append("%s: %d blocks per SM (%d registers), budget %d (%d registers)" % (k, now[k][0], now[k][1],
                                                                                         blocks, r))
        elif now[k][2] > st:
            bad.append("%s: %d bytes of stack frame (local memory), budget %d" % (k, now[k][2], st))
    better = [k for k in now if k in budget and now[k][0] > budget[k][0]]
    new = [k for k in now if k not in budget]
    for k in better:
        print("check_occupancy: %s now fits %d blocks per SM (budget %d): --update to keep it" % (k, now[k][0],
                                                                                                 budget[k][0]))
    if new:
        print("check_occupancy: %d kernels not in the budget (--update to add them), e.g. %s" % (len(new), new[0]))
    if bad:
        print("check_occupancy: FAILED\n  " + "\n  ".join(bad))
        return 1
    print("check_occupancy: %d kernels within budget" % len(budget))
    return 0


if __name__ == "__main__":
    sys.exit(main())
