/* cast.c - Cast (written by the user) and amp_cast (inserted by AMP).
 *
 * They share a schema but not a meaning: AMP never rewrites a user's Cast
 * unless it became a no-op, while its own amp_casts are freely merged. */
#include "ops_impl.h"

const AttrSpec cast_attrs[] = {
    {"dtype", AT_DTYPE, true, NULL, 0, 0, NULL},
    ATTR_END,
};
