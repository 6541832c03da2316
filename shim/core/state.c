/* The shim's process-wide state (state.h): defined here, apart from
 * start-up (shim.c), which fills it in, so that the rest of core reads it
 * without depending on the code that starts the shim. */
#include "core/state.h"

struct bh_shim bh_shim;
