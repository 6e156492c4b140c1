/* paths.h: the one default data directory every gpuq binary uses when none is
 * given: $GPUQ_DATA, else $XDG_DATA_HOME/gpuq, else $HOME/.local/share/gpuq.
 * Installed as a service, the units pass /var/lib/gpuq explicitly. */
#ifndef GPUQ_COMMON_PATHS_H
#define GPUQ_COMMON_PATHS_H

#include <stddef.h>

/* Written in help texts, so that every binary shows the same rule. */
#define PATHS_DATA_HELP "$GPUQ_DATA, else $XDG_DATA_HOME/gpuq, else ~/.local/share/gpuq"

/* paths_default_data writes the default data directory into out. Returns 0,
 * or GPUQ_ENOENT when none of the variables is set (out is then "gpuq-data",
 * relative to the current directory), or GPUQ_EINVAL when it does not fit. */
int paths_default_data(char *out, size_t size);

#endif
