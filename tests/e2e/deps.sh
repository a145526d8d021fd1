#!/bin/sh
# The demo needs no test package (issue 28): on a machine that has exactly
# the packages of tools/deps.txt, a non-root `make deps` (what `make demo`
# runs) passes, while `make deps-test` (make check, .ci/run) names what the
# tests need; no package is in both lists; `make demo` asks for deps, not
# deps-test.  dpkg-query and id are faked on PATH: nothing is installed.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "PASS deps.sh: $1"; }
bad() { echo "FAIL deps.sh: $1"; fail=1; }
pkgs() { sed -e 's/#.*//' "$@" | tr -s ' \t' '\n\n' | sed '/^$/d' | sort; }

pkgs "$here/tools/deps.txt" > "$tmp/build"
pkgs "$here/tools/deps-test.txt" > "$tmp/test"
[ -s "$tmp/build" ] && [ -s "$tmp/test" ] || bad "a list is empty"
both=$(comm -12 "$tmp/build" "$tmp/test" | tr '\n' ' ')
[ -z "$both" ] && ok "no package in both lists" || bad "in both lists: $both"
for p in valgrind clang libcmocka-dev llvm-14-tools python3-venv; do
    grep -qx "$p" "$tmp/build" && bad "test package $p is in tools/deps.txt"
done

# run by make (e2e, perhaps with -j2): the inner makes must not inherit its
# flags and jobserver, or make demo sees a -j already given
unset MAKEFLAGS MFLAGS MAKELEVEL

mkdir "$tmp/bin"
# installed: exactly tools/deps.txt's packages; the user: not root
cat > "$tmp/bin/dpkg-query" <<EOT
#!/bin/sh
for p; do :; done
grep -qx "\$p" "$tmp/build" && printf 'install ok installed' && exit 0
exit 1
EOT
printf '#!/bin/sh\necho 1000\n' > "$tmp/bin/id"
chmod +x "$tmp/bin/dpkg-query" "$tmp/bin/id"
if PATH="$tmp/bin:$PATH" make -s -C "$here" deps > "$tmp/out" 2>&1; then
    ok "make deps (the demo's) passes as non-root with only tools/deps.txt installed"
else
    bad "make deps failed with only tools/deps.txt installed:"; cat "$tmp/out"
fi
if PATH="$tmp/bin:$PATH" make -s -C "$here" deps-test > "$tmp/out" 2>&1; then
    bad "make deps-test passed without the test packages"
elif grep -q "not root; install these by hand:.* valgrind" "$tmp/out"; then
    ok "make deps-test names the missing test packages"
else
    bad "make deps-test's message:"; cat "$tmp/out"
fi
# make demo's first step is deps; make check's is deps-test
make -n -C "$here" demo 2>/dev/null | grep -q 'no-print-directory deps$' &&
    ok "make demo runs make deps" || bad "make demo does not run make deps"
# its build runs in parallel unless a -j was given, and then as given
make -n -C "$here" demo 2>/dev/null | grep -q -- "-j[0-9][0-9]* data " &&
    ! make -n -j1 -C "$here" demo 2>/dev/null | grep -q -- "-j[0-9][0-9]* data " &&
    ok "make demo builds with -j (one job per core) unless a -j is given" ||
    bad "make demo's -j"
make -n -C "$here" check 2>/dev/null | grep -q 'no-print-directory deps-test$' &&
    ok "make check runs make deps-test" || bad "make check does not run make deps-test"
grep -q '^make deps-test' "$here/.ci/run" && ok ".ci/run installs both lists" ||
    bad ".ci/run does not run make deps-test"
exit $fail
