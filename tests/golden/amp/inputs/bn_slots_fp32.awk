# helper for 40_bn_slots_fp32.sym: every input of a BatchNorm after its data
# (gamma, beta, moving mean and variance) must be an fp32 value in an IR dump.
{
    id = $1; sub(/:.*/, "", id)
    t = $1; sub(/^[^:]*:/, "", t); sub(/\[.*/, "", t)
    type[id] = t
}
/= BatchNorm\(/ {
    s = $0; sub(/.*= BatchNorm\(/, "", s); sub(/\).*/, "", s)
    n = split(s, in_, ", ")
    for (i = 2; i <= n; i++)
        if (type[in_[i]] != "f32") { print "not fp32: input " i " of " $0; bad = 1 }
    seen++
}
END { if (!seen) { print "no BatchNorm"; bad = 1 } exit bad }
