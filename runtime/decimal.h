/* decimal.h - the number grammar of every setting, of ampc's flags and of its
 * machine files, and of the readers of text the runtime parses (recordio()'s
 * options, the digits CSV): decimal only, [+-]digits for an integer,
 * [+-](digits[.digits]|.digits)[(e|E)[+-]digits] for a number.  No hex
 * (0x10, which strtod and strtoull would read as 16), no inf or nan, no
 * white space around it (issue 21).  Header-only, so a reader linked
 * alone (a fuzz target) has it; settings.h parses whole strings with it
 * (rt_parse_i64, rt_parse_f64). */
#ifndef AMPC_DECIMAL_H
#define AMPC_DECIMAL_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The length of the number at the start of s, 0 when none starts there. */
static inline size_t rt_decimal_len(const char *s, bool integer)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (!integer && *p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        digits += frac;
        p += 1 + frac;
    }
    if (digits == 0)
        return 0;
    if (!integer && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        if (*q == '+' || *q == '-')
            q++;
        size_t ex = strspn(q, "0123456789");
        if (ex == 0)
            return 0;
        p = q + ex;
    }
    return (size_t)(p - s);
}

#endif /* AMPC_DECIMAL_H */
