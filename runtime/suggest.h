/* suggest.h - did-you-mean for names: ampc's (the DSL, its flags, op and
 * pass names) and a training program's (its flags).  A leaf like
 * settings.c, linked into both ampc and the runtime. */
#ifndef AMPC_SUGGEST_H
#define AMPC_SUGGEST_H

/* Levenshtein distance between two words; 99 for words over 40 bytes. */
int rt_edit_distance(const char *a, const char *b);
/* Whether cand is a likely misspelling of want (about a third of it may
 * differ) and closer than *dist: then *dist becomes its distance. */
int rt_suggest_closer(const char *want, const char *cand, int *dist);

#endif
