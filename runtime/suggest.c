/* suggest.c - did-you-mean (suggest.h). */
#include "suggest.h"

#include <string.h>

int rt_edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 40 || lb > 40)
        return 99;
    int row[41];
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int cur = row[j];
            int sub = prev + (a[i - 1] != b[j - 1]);
            int del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            prev = cur;
        }
    }
    return row[lb];
}

int rt_suggest_closer(const char *want, const char *cand, int *dist)
{
    int d = rt_edit_distance(want, cand);
    int limit = (int)strlen(want) / 3 + 1;
    if (d <= limit && d < (int)strlen(want) && d < *dist) {
        *dist = d;
        return 1;
    }
    return 0;
}
