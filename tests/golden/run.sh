#!/usr/bin/env bash
# A small lit: runs the "# RUN:" lines of every test under tests/golden (or
# of the files given after the compiler), LLVM-style.
#
#   # RUN: %ampc %s --dump=infer-shapes | %FileCheck %s
#   # RUN: not %ampc %s 2>&1 | %FileCheck %s --check-prefix=ERR
#
# Substitutions: %ampc (the compiler, with the IR verifier on), %s (the test
# file), %S (its folder), %t (a scratch path unique to the test), %FileCheck,
# %noprov (a filter that drops the `# provenance:` line of a dump, which
# names the input and the flags: for comparing dumps made from different
# inputs), and `not CMD` (succeeds when CMD fails, but not when it crashes).
# A test passes when every RUN line exits 0; a file with no RUN line fails.
set -u
here=$(cd "$(dirname "$0")" && pwd)
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
# $FILECHECK first, then where llvm-14-tools puts it: the make that calls this
# may have set FILECHECK before its own deps-test installed the package (a
# fresh machine's make check), so a FILECHECK that is not there is not final
filecheck=
for f in ${FILECHECK:+"$FILECHECK"} /usr/lib/llvm-14/bin/FileCheck FileCheck-14 FileCheck; do
    if [ -x "$f" ] || command -v "$f" >/dev/null; then filecheck=$f; break; fi
done
if [ -z "$filecheck" ]; then
    echo "run.sh: FileCheck not found (install llvm-14-tools or set FILECHECK)" >&2
    exit 1
fi
if [ $# -gt 0 ]; then tests=("$@"); else
    mapfile -t tests < <(find "$here" -type f \( -name '*.sym' -o -name '*.ir' \) | sort)
fi
# Sanitizer reports must not pass for an expected error under `not`.
export AMPC_VERIFY=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=199"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}exitcode=199"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:abort_on_error=1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=$(cd "$here/../.." && pwd)
pass=0 fail=0 failed=()
ti=0
for t in "${tests[@]}"; do
    ti=$((ti+1))
    rel=${t#"$root"/}
    # a RUN line ending in a backslash continues on the next RUN line
    lines=$(grep -E '^\s*(#|//) ?RUN: ' "$t" | sed -E 's/^\s*(#|\/\/) ?RUN: //' |
            awk '{ if (sub(/\\$/, "")) { buf = buf $0 } else { print buf $0; buf = "" } }')
    if [ -z "$lines" ]; then
        # helper files (imported by tests) carry no RUN line
        if grep -qE '^\s*#\s*(helper|imported by)' "$t"; then continue; fi
        echo "FAIL $rel: no RUN line"; fail=$((fail+1)); failed+=("$rel"); continue
    fi
    ok=1 n=0
    while IFS= read -r line; do
        n=$((n+1))
        cmd=${line//%ampc/$ampc}
        cmd=${cmd//%FileCheck/$filecheck}
        cmd=${cmd//%noprov/sed -e \'/^# provenance: /d\'}
        cmd=${cmd//%S/$(dirname "$rel")}
        cmd=${cmd//%s/$rel}
        cmd=${cmd//%t/$tmp\/t$ti}
        out=$(cd "$root" && bash -o pipefail -c "
not() { \"\$@\"; rc=\$?; [ \$rc -ne 0 ] && [ \$rc -lt 128 ]; }
$cmd" 2>&1)
        if [ $? -ne 0 ]; then
            ok=0
            echo "FAIL $rel (RUN line $n): $line"
            echo "$out" | head -30 | sed 's/^/    /'
            break
        fi
    done <<< "$lines"
    if [ $ok = 1 ]; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("$rel"); fi
done
echo "golden: $pass passed, $fail failed"
[ $fail -eq 0 ]
