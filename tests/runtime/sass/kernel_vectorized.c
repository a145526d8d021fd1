/* kernel_vectorized.c - prints ir/kernels.def's vectorized column, one CUDA
 * kernel name per line (rows marked NULL print nothing), for the SASS check
 * (tests/runtime/cuda_sass_check.sh): the X-macro is read by the compiler, not
 * by a pattern. */
#include <stdio.h>
#include <string.h>

static void names(const char *vectorized)
{
    char buf[512];
    if (!vectorized)
        return;
    snprintf(buf, sizeof buf, "%s", vectorized);
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
        puts(t);
}

int main(void)
{
#define KERNEL(id, family, cpu, ws, mode, cuda, overwrites, unread, vectorized) names(vectorized);
#include "../../../ir/kernels.def"
#undef KERNEL
    return 0;
}
