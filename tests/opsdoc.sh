#!/bin/sh
# docs/ops.md is what `ampc --describe-op=all` prints from the op table
# (issue 28): regenerate it and fail on any difference (make ops-doc
# rewrites it).  Also: --list-ops names every op of the reference, and
# --describe-op prints one op's section of it.
set -u
ampc=${1:?usage: opsdoc.sh AMPC}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$ampc" --describe-op=all > "$tmp/ops.md" || { echo "FAIL opsdoc.sh: ampc --describe-op=all failed"; exit 1; }
if diff -u "$here/docs/ops.md" "$tmp/ops.md" > "$tmp/diff"; then
    echo "PASS opsdoc.sh: docs/ops.md is what ampc --describe-op=all prints"
else
    echo "FAIL opsdoc.sh: docs/ops.md differs from ampc --describe-op=all (make ops-doc regenerates it):"
    head -40 "$tmp/diff"; fail=1
fi
# every op --list-ops names has its section, and --describe-op prints it
"$ampc" --list-ops | awk 'NF == 0 {exit} {print $1}' > "$tmp/ops"
n=0
while read -r op; do
    n=$((n+1))
    grep -qx "### $op" "$tmp/ops.md" || { echo "FAIL opsdoc.sh: $op (--list-ops) has no section"; fail=1; }
    "$ampc" --describe-op="$op" > "$tmp/one" && grep -qx "### $op" "$tmp/one" ||
        { echo "FAIL opsdoc.sh: --describe-op=$op"; fail=1; }
done < "$tmp/ops"
[ "$n" -ge 25 ] || { echo "FAIL opsdoc.sh: --list-ops listed $n ops"; fail=1; }
"$ampc" --describe-op=Convolution | grep -q '^| `num_filter` | int | required |' ||
    { echo "FAIL opsdoc.sh: Convolution's num_filter row"; fail=1; }
# an unknown name is an error naming the op meant
out=$("$ampc" --describe-op=relu 2>&1) && { echo "FAIL opsdoc.sh: --describe-op=relu succeeded"; fail=1; }
echo "$out" | grep -q "write Activation(x, act_type=\"relu\")" ||
    { echo "FAIL opsdoc.sh: --describe-op=relu said: $out"; fail=1; }
out=$("$ampc" --describe-op=Convolutoin 2>&1)
echo "$out" | grep -q "did you mean 'Convolution'" ||
    { echo "FAIL opsdoc.sh: --describe-op=Convolutoin said: $out"; fail=1; }
[ $fail = 0 ] && echo "PASS opsdoc.sh: --list-ops ($n ops) and --describe-op"
exit $fail
