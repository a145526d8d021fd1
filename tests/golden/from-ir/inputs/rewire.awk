# rewire.awk - edits a dump for the reader's tests: input K (from 0) of the
# node named NODE becomes the value named TO, in the first graph of the
# file (a training graph; its inference graph follows).  Read the file
# twice: the first pass learns the ids of the names.
#
#   awk -v node=fc1_weight_grad_of -v k=1 -v to=fc2_weight -f rewire.awk D.ir D.ir
FNR == 1 { pass++; graph = 0 }
/^model / { graph++ }
pass == 1 {
    if (graph == 1 && match($0, /name="[^"]*"/)) {
        split($1, a, ":")
        id[substr($0, RSTART + 6, RLENGTH - 7)] = a[1]
    }
    next
}
graph == 1 && index($0, "{name=\"" node "\"") {
    if (!(to in id)) { print "rewire.awk: no value named " to > "/dev/stderr"; exit 1 }
    p = index($0, "("); q = index($0, ")")
    n = split(substr($0, p + 1, q - p - 1), args, ", ")
    line = substr($0, 1, p)
    for (i = 1; i <= n; i++)
        line = line (i > 1 ? ", " : "") (i == k + 1 ? id[to] : args[i])
    $0 = line substr($0, q)
}
{ print }
