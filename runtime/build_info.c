/* build_info.c - what the build compiled into the runtime: its release
 * version and git revision (a program's --version; make writes them into
 * BUILD/gen/version.h) and the default data directory (--data-dir's
 * default when $AMPC_DATA_DIR is unset).
 *
 * Alone in its file so that `make install` can compile it again with the
 * installed data directory and put it into the installed libampcrt.a in
 * place of the build tree's (the build tree's data would be gone once the
 * checkout is). */
#include "settings.h"
#include "version.h"

#ifndef AMPC_DEFAULT_DATA_DIR
#define AMPC_DEFAULT_DATA_DIR "./data"
#endif

const char *rt_default_data_dir(void) { return AMPC_DEFAULT_DATA_DIR; }
const char *rt_release_version(void) { return AMPC_RELEASE_VERSION; }
const char *rt_git_revision(void) { return AMPC_GIT_REV; }
