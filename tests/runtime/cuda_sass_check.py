#!/usr/bin/env python3
"""cuda_sass_check.py - what the CUDA kernels compile to, read from their SASS
(make cuda-check; docs/backend-cuda.md, "What is proven where").

    cuda_sass_check.py --tools DIR [--fma-exempt OBJ ...] [--vectorized NAME ...]
                       [--expect-fail] [--ptxas-log LOG ...] OBJ ...

DIR holds cuobjdump and nvdisasm (the PyPI wheels nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm: make sass-env).  For every object:

1. Architectures: its fat binary holds SASS (an ELF) for sm_80 and sm_90.
2. Local memory: no kernel loads or stores local memory (LDL, STL, and the
   stack's LDL/STL) unless ptxas reported a stack frame for it (--ptxas-log):
   a declared local array is allowed and listed, a spill never is (ptxas's
   own spill count is checked by cuda_ptx_check.sh; this sees what runs).
3. Fused multiply-adds: the CPU twins never fuse a*b+c (-ffp-contract=off),
   so the kernels are built with -fmad=false and their SASS must hold no FFMA,
   DFMA or HFMA2/HFMA (fused, one rounding) except (a) inside the correctly
   rounded division, reciprocal and square-root subroutines of CUDA's
   runtime, identified by their labels ($__internal_N_$__cuda_..._div_...,
   _rcp_, _sqrt_, _dblrcp_, _dsqrt_), (b) on those operations' inline fast
   paths: an FMA computing from a MUFU.RCP/RSQ result (a register taint
   followed through the straight-line code) within 64 instructions of a CALL
   of such a subroutine (the slow path, placed before or after the fast
   one), and (c) an FMA with the zero
   register as a multiplicand (0*x is exact, so fused and unfused agree; the
   compiler's HFMA2.MMA R, -RZ, RZ, imm is a move).  Objects named with
   --fma-exempt (math.cu: the libm twins, whose fma is CUDA libm's own) are
   not checked for this.
4. Vector loads: every kernel whose name (demangled: the function name
   without its parameters) is given with --vectorized issues at least one
   128-bit global load (LDG.E.128 or LDG.E.128.CONSTANT).
5. Registers: each kernel's registers per thread (cuobjdump -res-usage) are
   printed, per architecture.

Exit 0 when every check holds, 1 when one fails (each failure printed with
the object, the architecture, the kernel and the instruction), 2 on bad
usage or a missing tool.  With --expect-fail the sense is reversed: exit 0
only when at least one failure was found (the planted fixtures prove the
checks can fail).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ARCHS = ("sm_80", "sm_90")
INSN = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)\s*(.*?)\s*;")
SECTION = re.compile(r"^\.text\.(\S+):$")
SUBROUTINE = re.compile(r"^\$__internal_\d+_\$__cuda_\w*?(div|rcp|sqrt)\w*:$")
CALL_TARGET = re.compile(r"\$__internal_\d+_\$__cuda_\w*?(div|rcp|sqrt)\w*")
FMA_OPS = ("FFMA", "DFMA", "HFMA2", "HFMA")
WINDOW = 16


def run(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s %s: %s" % (os.path.basename(tool), " ".join(args), r.stderr.strip()))
    return r.stdout


def demangle_name(mangled):
    """_Z14ampc_k_smo_bwdmm... -> ampc_k_smo_bwd (the Itanium length prefix)."""
    m = re.match(r"_Z(\d+)", mangled)
    if not m:
        return mangled
    n = int(m.group(1))
    start = m.end()
    return mangled[start:start + n]


def functions(sass):
    """{kernel: [(offset, opcode, modifiers, operands, in_subroutine)]}"""
    out, cur, sub = {}, None, False
    for line in sass.splitlines():
        s = line.strip()
        m = SECTION.match(s)
        if m:
            cur, sub = m.group(1), False
            out[cur] = []
            continue
        if cur is None:
            continue
        if SUBROUTINE.match(s):
            sub = True
            continue
        if s.startswith("$__internal_") and s.endswith(":"):
            sub = False  # another internal routine (integer division): checked as code
            continue
        m = INSN.match(line)
        if m:
            out[cur].append((m.group(1), m.group(2), m.group(3), m.group(4), sub))
    return out


REG = re.compile(r"\bR(\d+)\b")
NO_DEST = ("ST", "BRA", "CALL", "EXIT", "BSSY", "BSYNC", "RET", "BAR", "MEMBAR", "RED", "NOP",
           "WARPSYNC", "ISETP", "FSETP", "DSETP", "HSETP2", "PLOP3")


def regs(operand, wide):
    """the registers an operand names; a 64-bit operand (wide) names the pair"""
    out = set()
    for m in REG.finditer(operand):
        n = int(m.group(1))
        out.add(n)
        if wide:
            out.add(n + 1)
    return out


def recip_chains(insns):
    """indices of the instructions that compute from a MUFU.RCP/RSQ result: the
    Newton-Raphson steps of a correctly rounded division, reciprocal or square
    root (a straight-line taint from the MUFU, cleared when a register is
    overwritten by anything else)"""
    tainted, chain = set(), set()
    for i, (off, op, mods, args, sub) in enumerate(insns):
        ops = [a.strip() for a in args.split(",")] if args else []
        wide = op.startswith("D") or ".F64" in mods or "64" in mods
        dest = set() if op.startswith(NO_DEST) or not ops else regs(ops[0], wide and op != "MUFU")
        src = set()
        for a in ops[0 if not dest else 1:]:
            src |= regs(a, wide)
        seed = op == "MUFU" and re.match(r"\.(RCP|RSQ)(64H)?$", mods)
        if seed or (src & tainted):
            chain.add(i)
            tainted |= dest
        else:
            tainted -= dest
    return chain


def fma_allowed(insns, i, chain):
    off, op, mods, args, sub = insns[i]
    if sub:
        return True
    mult = [a.strip() for a in args.split(",")][1:3]
    if any(a.lstrip("-|").rstrip("|") == "RZ" for a in mult):
        return True
    near = insns[max(0, i - 4 * WINDOW):i + 1 + 4 * WINDOW]
    call = any(o == "CALL" and CALL_TARGET.search(a) for _, o, _, a, _ in near)
    return i in chain and call


def stack_kernels(logs):
    """kernels ptxas gave a stack frame (per architecture)"""
    have = set()
    for log in logs:
        fn = arch = None
        with open(log) as f:
            for line in f:
                m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
                if m:
                    fn, arch = m.group(1), m.group(2)
                m = re.search(r"(\d+) bytes stack frame", line)
                if m and fn and int(m.group(1)) > 0:
                    have.add((fn, arch))
    return have


def registers(tools, obj):
    """{(arch, kernel): registers}"""
    text = run(os.path.join(tools, "cuobjdump"), "-res-usage", obj)
    regs, arch = {}, None
    fn = None
    for line in text.splitlines():
        m = re.match(r"\s*arch = (sm_\d+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            fn = m.group(1)
        m = re.search(r"REG:(\d+)", line)
        if m and fn:
            regs[(arch, fn)] = int(m.group(1))
            fn = None
    return regs


def check(args):
    fails, notes = [], []
    cuobjdump = os.path.join(args.tools, "cuobjdump")
    nvdisasm = os.path.join(args.tools, "nvdisasm")
    stacks = stack_kernels(args.ptxas_log or [])
    vec_seen = {v: False for v in args.vectorized or []}
    exempt = {os.path.abspath(p) for p in args.fma_exempt or []}
    for obj in args.objects:
        name = os.path.basename(obj)
        listing = run(cuobjdump, "--list-elf", obj)
        for arch in ARCHS:
            if not re.search(r"\.%s\.cubin" % arch, listing):
                fails.append("%s: no SASS for %s (cuobjdump --list-elf: %s)" %
                             (name, arch, " ".join(listing.split())))
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(obj)], cwd=tmp,
                           capture_output=True, check=True)
            for cubin in sorted(os.listdir(tmp)):
                am = re.search(r"\.(sm_\d+)\.cubin$", cubin)
                if not am:
                    continue
                arch = am.group(1)
                sass = run(nvdisasm, "-c", os.path.join(tmp, cubin))
                for fn, insns in functions(sass).items():
                    short = demangle_name(fn)
                    local = [i for i in insns if i[1] in ("LDL", "STL")]
                    if local and (fn, arch) not in stacks:
                        o = local[0]
                        fails.append("%s %s %s: local memory (%s%s at %s) without a stack frame in "
                                     "ptxas's report: a spill" % (name, arch, short, o[1], o[2], o[0]))
                    elif local:
                        notes.append("%s %s %s: a stack frame (a local array), %d local accesses" %
                                     (name, arch, short, len(local)))
                    if os.path.abspath(obj) not in exempt:
                        chain = recip_chains(insns)
                        for i, ins in enumerate(insns):
                            if ins[1] in FMA_OPS and not fma_allowed(insns, i, chain):
                                fails.append("%s %s %s: %s%s %s at %s: a fused multiply-add outside "
                                             "division/sqrt (built without -fmad=false?)" %
                                             (name, arch, short, ins[1], ins[2], ins[3], ins[0]))
                                break
                    if short in vec_seen:
                        wide = any(i[1] == "LDG" and ".128" in i[2] for i in insns)
                        vec_seen[short] = vec_seen[short] or wide
                        if not wide:
                            fails.append("%s %s %s: marked vectorized, but no 128-bit global load "
                                         "(LDG.E.128) in its SASS" % (name, arch, short))
        for (arch, fn), n in sorted(registers(args.tools, obj).items()):
            print("cuda_sass_check: registers %s %-6s %-40s %3d" % (name, arch, demangle_name(fn), n))
    for v, seen in vec_seen.items():
        if not seen and not any(v in f for f in fails):
            fails.append("kernel %s is marked vectorized but is in none of the objects" % v)
    for n in notes:
        print("cuda_sass_check: note: %s" % n)
    return fails


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tools", required=True)
    p.add_argument("--fma-exempt", action="append")
    p.add_argument("--vectorized", action="append")
    p.add_argument("--ptxas-log", action="append")
    p.add_argument("--expect-fail", action="store_true")
    p.add_argument("objects", nargs="+")
    args = p.parse_args()
    for t in ("cuobjdump", "nvdisasm"):
        if not os.access(os.path.join(args.tools, t), os.X_OK):
            print("cuda_sass_check: %s not found in %s (make sass-env)" % (t, args.tools))
            return 2
    try:
        fails = check(args)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print("cuda_sass_check: %s" % e)
        return 2
    for f in fails:
        print("cuda_sass_check: %s%s" % ("FAIL: " if not args.expect_fail else "caught: ", f))
    if args.expect_fail:
        if not fails:
            print("cuda_sass_check: FAIL: the planted fixture passed: the check cannot fail")
            return 1
        return 0
    print("cuda_sass_check: %s" % ("FAILED" if fails else "every object passed"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
