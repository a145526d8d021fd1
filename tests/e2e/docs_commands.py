#!/usr/bin/env python3
"""docs_commands.py BUILD: every shell command in the README's and docs/'s
code blocks runs, as a reader would type it, in a scratch folder (issue 28).

The commands are read from the documents themselves, never copied here:
- a block fenced ```sh holds commands, one per line (a line ending in a
  backslash continues on the next); `export A=B` lines set the environment
  of the commands after them in that document;
- a ```console block is a session: the lines after "$ " are commands, the
  rest their output;
- a ```sym block whose first line is "# NAME.sym" is the file NAME.sym,
  written into the folder before the document's commands run;
- any other block with a line that looks like a command (ampc, build/, ./,
  make, mpirun, cc, "$ ") fails the test: it would escape it.
Each document runs in a folder of its own where `examples`, `runtime`,
`tests`, `tools` and `build` lead to this tree and `ampc` (PATH) is BUILD's.
The inputs the documents assume (an MXNet symbol JSON, .npy files, MXNet
weights) are made first, by the commands in INPUTS.  A program built with
--target=cuda is compiled only.  The few commands that cannot run here are
in SKIP with their reason and printed as SKIPPED; the few whose full run is
too long for the test are in CAP, run shortened and printed as CAPPED.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (document, a regex the command matches, why it cannot run here, and the
# program whose absence is the reason, or None: always skipped)
SKIP = [
    ("README.md", r"^dot ",
     "Graphviz's dot is not installed (not a dependency: ampc writes the .dot, dot only draws it)",
     "dot"),
    ("README.md", r"^make (demo|check)\b",
     "the README's contract on a fresh Debian machine as root (make check runs the tests, this one among them)",
     None),
    ("README.md", r"^make && make data",
     "builds this tree, which this test runs on (make all and make data come first)", None),
    ("README.md", r"^make install",
     "installs: tests/e2e/newcomer.sh installs from a copy of the tree into a scratch HOME",
     None),
    ("docs/kvstore.md", r"--hostfile",
     "several machines (Open MPI's hostfile)", None),
    ("docs/mxnet.md", r"resnet18_v1-0000\.params",
     "MXNet's own weights (net.export in MXNet); tests/mxnet/params.sh runs this against MXNet 1.9.1",
     None),
    ("docs/training.md", r"cifar10\(\"/data/",
     "the CIFAR-10 binary files, which are not reachable here (the reader is tested on generated files)",
     None),
    ("docs/training.md", r"--data-dir ~/mnist",
     "the reader's own MNIST download", None),
    ("docs/training.md", r"im2rec train\.lst|recordio\(train\.rec",
     "a folder of the reader's JPEG images (tests/recordio/run.sh builds its own)", None),
    ("docs/ci.md", r"^examples/ci/ci\.sh ",
     "run from a model repository laid out as above (tests/ci/run.sh runs examples/ci/ci.sh on "
     "examples/ and examples/ci/golden/)", None),
    ("docs/ci.md", r"^ampc diff golden/.* models/",
     "an illustration: the model repository's resnet50_v1d.sym with a Dropout inserted, against "
     "its golden (tests/ci/run.sh runs that case)", None),
]

# (document, a regex, the exit status the command is documented to give, why)
EXPECT_EXIT = [
    ("README.md", r"^ampc diff r50\.json ",
     1, "diff's 'they differ': r50.json holds the float16 graph, the model is compiled --amp=off"),
]

# (document, a regex, flags appended, why): runs shortened, said as CAPPED
CAP = [
    ("docs/training.md", r"--data fashion_mnist", " --max-steps 20",
     "an epoch of Fashion-MNIST's 60,000 images takes a minute"),
]

# What a document's commands expect to find: made first, in its folder.
NPY = "python3 tools/make_npy.py"
# an example's forward graph as MXNet symbol JSON, without its loss head, as
# Gluon's net.export writes a network (--loss=softmax adds one back)
HEADLESS = ("import json, sys; j = json.load(open(sys.argv[1])); "
            "h = j['nodes'][j['heads'][0][0]]; assert h['op'] == 'SoftmaxOutput'; "
            "j['heads'] = [h['inputs'][0]]; json.dump(j, open(sys.argv[1], 'w'))")
RESNET_JSON = "ampc examples/resnet20_cifar.sym --amp=off --emit-mxnet-json {0} && python3 -c \"%s\" {0}" % HEADLESS
INPUTS = {
    "README.md": [f"{NPY} x.npy 4,1,8,8", RESNET_JSON.format("r18-symbol.json"),
                  # an expect file: one assertion on the report (docs/ci.md, "Expect files")
                  "printf 'params.trainable == 25576264\\n' > r50.expect"],
    "docs/mxnet.md": [
        RESNET_JSON.format("resnet18_v1-symbol.json"),
        f"{NPY} x.npy 4,64",
        # MXNet's mod.save_checkpoint("mlp", 0) gives mlp-0000.params: the
        # same format as a program's --save-params, which MXNet loads
        # (tests/mxnet/params.sh)
        "ampc examples/mlp.sym -o .mlp_weights && ./.mlp_weights --data digits --max-steps 2 "
        "--log-interval 0 --save-params mlp-0000.params",
    ],
}

COMMAND_LIKE = re.compile(r"^(ampc |build/|\./|make\b|mpirun |cc |python3 |\$ |"
                          r"(examples|tests|tools)/\S+\.(sh|py) )")
TIMEOUT = 300


def blocks(path):
    """(first line number, language, lines) of each fenced block"""
    out, lang, start, body = [], None, 0, []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("```"):
                if lang is None:
                    lang, start, body = line[3:].strip(), no + 1, []
                else:
                    out.append((start, lang, body))
                    lang = None
            elif lang is not None:
                body.append(line)
    return out


def complete(cmd):
    """whether cmd ends outside a quoted string (a quote may span lines)"""
    try:
        shlex.split(cmd, comments=True)
        return True
    except ValueError:
        return False


def commands(start, lang, body):
    """(line number, command) of a block, continuations joined"""
    out, acc, at = [], "", 0
    for k, line in enumerate(body):
        if lang == "console":
            if not line.startswith("$ ") and not acc:
                continue
            line = line[2:] if line.startswith("$ ") else line
        stripped = line.strip()
        if not acc and (not stripped or stripped.startswith("#")):
            continue
        if not acc:
            at = start + k
        if line.endswith("\\"):
            acc += line[:-1] + " "
            continue
        if not complete(acc + line):
            acc += line + "\n"
            continue
        out.append((at, acc + line))
        acc = ""
    return out


def unmarked_command(lang, body):
    """the index of the first command-like line of a block that is not
    marked as commands (it would escape the test), else None"""
    if lang in ("sh", "console", "sym", "c", "text"):  # text: a synopsis, an output
        return None
    for k, line in enumerate(body):
        if COMMAND_LIKE.match(line.strip()):
            return k
    return None


def self_check():
    """the extraction on a made-up document: what it must find and refuse"""
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        f.write("x\n```sh\nampc a.sym \\\n   -o a   # c\n# note\n./a --data 'x(1,\n 2)'\n```\n"
                "```console\n$ ampc b.sym\noutput\n```\n```\n./escaped\n```\n")
    got = blocks(f.name)
    os.unlink(f.name)
    assert [c for b in got if b[1] in ("sh", "console") for c in commands(*b)] == [
        (3, "ampc a.sym     -o a   # c"), (6, "./a --data 'x(1,\n 2)'"), (10, "ampc b.sym")], got
    assert unmarked_command(got[2][1], got[2][2]) == 0
    assert unmarked_command("sh", ["./fine"]) is None


def output_name(cmd):
    """the -o argument of an ampc command, if any"""
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:
        return None
    for i, w in enumerate(words[:-1]):
        if w == "-o":
            return words[i + 1]
    return None


class Run:
    def __init__(self, build):
        self.build = os.path.realpath(build)
        self.root = tempfile.mkdtemp(prefix="ampc_docs.")
        self.bin = os.path.join(self.root, "bin")
        os.mkdir(self.bin)
        for tool in ("ampc", "im2rec"):
            os.symlink(os.path.join(self.build, tool), os.path.join(self.bin, tool))
        self.passed = self.skipped = self.failed = 0
        self.has_cuda = os.path.exists(os.path.join(self.build, "libampccuda.a"))

    def folder(self, doc):
        d = os.path.join(self.root, doc.replace("/", "_"))
        os.mkdir(d)
        for name in ("examples", "runtime", "tests", "tools"):
            os.symlink(os.path.join(ROOT, name), os.path.join(d, name))
        os.symlink(self.build, os.path.join(d, "build"))
        return d

    def sh(self, cmd, cwd, env):
        t = time.time()
        try:
            p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=TIMEOUT)
            rc, out = p.returncode, p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, out = 124, f"(killed after {TIMEOUT} s)"
        return rc, out, time.time() - t

    def report(self, word, where, cmd, extra=""):
        print(f"{word} {where}: {cmd}{extra}", flush=True)

    def document(self, doc):
        path = os.path.join(ROOT, doc)
        cwd = self.folder(doc)
        env = dict(os.environ)
        env["PATH"] = self.bin + os.pathsep + env.get("PATH", "")
        env.pop("AMPC_DATA_DIR", None)  # the runtime's own default, as a reader's
        gpu_programs = set()
        todo = []
        for start, lang, body in blocks(path):
            if lang in ("sh", "console"):
                todo += commands(start, lang, body)
            elif lang == "sym" and body and re.match(r"^# [\w.-]+\.sym\b", body[0]):
                name = body[0].split()[1].rstrip(":")
                with open(os.path.join(cwd, name), "w", encoding="utf-8") as f:
                    f.write("\n".join(body) + "\n")
            elif unmarked_command(lang, body) is not None:
                k = unmarked_command(lang, body)
                self.failed += 1
                self.report("FAIL", f"{doc}:{start + k}", body[k].strip(),
                            " (a command in a block not marked ```sh or ```console)")
        for cmd in INPUTS.get(doc, []):
            rc, out, dt = self.sh(cmd, cwd, env)
            if rc != 0:
                self.failed += 1
                self.report("FAIL", f"{doc} (input)", cmd, f" (exit {rc})\n{out[-2000:]}")
            else:
                print(f"INPUT {doc}: {cmd} ({dt:.1f} s)", flush=True)
        for line, cmd in todo:
            self.command(doc, f"{doc}:{line}", cmd, cwd, env, gpu_programs)

    def command(self, doc, where, cmd, cwd, env, gpu_programs):
        for d, pattern, why, tool in SKIP:
            if d == doc and re.search(pattern, cmd) and (tool is None or not shutil.which(tool)):
                self.skipped += 1
                self.report("SKIPPED", where, cmd, f": {why}")
                return
        if re.match(r"^export\s", cmd.strip()):
            # as a shell would: the variables expanded, kept for the commands after
            rc, out, _ = self.sh(cmd + "\nenv -0", cwd, env)
            if rc != 0:
                self.failed += 1
                self.report("FAIL", where, cmd, f" (exit {rc})\n{out[-2000:]}")
                return
            env.clear()
            env.update(kv.partition("=")[::2] for kv in out.split("\0") if "=" in kv)
            self.passed += 1
            self.report("PASS", where, cmd)
            return
        if "--target=cuda" in cmd and output_name(cmd):
            gpu_programs.add(output_name(cmd))
            if not self.has_cuda:
                self.skipped += 1
                self.report("SKIPPED", where, cmd,
                            ": this build has no CUDA runtime library (no nvcc where it was built)")
                return
        prog = cmd.split()[0]
        if prog.startswith("./") and prog[2:] in gpu_programs:
            self.skipped += 1
            self.report("SKIPPED", where, cmd, ": a GPU program, compiled only (no GPU here)")
            return
        note = ""
        for d, pattern, flags, why in CAP:
            if d == doc and re.search(pattern, cmd):
                cmd_run = re.sub(r"(\s+#.*)?$", flags, cmd, count=1)
                note = f" [CAPPED: run with{flags}: {why}]"
                break
        else:
            cmd_run = cmd
        rc, out, dt = self.sh(cmd_run, cwd, env)
        want = 0
        for d, pattern, code, why in EXPECT_EXIT:
            if d == doc and re.search(pattern, cmd):
                want, note = code, f"{note} [exit {code} as documented: {why}]"
        if rc == want:
            self.passed += 1
            self.report("CAPPED" if "[CAPPED" in note else "PASS", where, cmd, f" ({dt:.1f} s){note}")
        else:
            self.failed += 1
            self.report("FAIL", where, cmd, f" (exit {rc}){note}\n{out[-3000:]}")


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: docs_commands.py BUILD\n")
        return 2
    t0 = time.time()
    self_check()
    run = Run(argv[1])
    docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs"))
                                  if f.endswith(".md"))
    try:
        for doc in docs:
            run.document(doc)
    finally:
        subprocess.run(["rm", "-rf", run.root])
    # the extraction itself must not silently find nothing
    if run.passed < 40:
        run.failed += 1
        print(f"FAIL docs_commands: only {run.passed} commands ran: is the extraction broken?")
    print(f"docs_commands: {run.passed} passed, {run.skipped} skipped, {run.failed} failed "
          f"({time.time() - t0:.0f} s)")
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
