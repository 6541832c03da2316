/* The mark of a function on the matched connect's path that is defined
 * in one file and called from another: the shim is linked with link-time
 * optimisation (the Makefile's LTO), which inlines each call to it into
 * its caller. The call between files would cost a frame (its saved
 * registers, about 20 instructions) on every connect or close; the code
 * stays in the room that owns what it touches. Built without LTO (the
 * sanitizer tiers, the unit programs, the fuzzers) it is an ordinary
 * call. */
#ifndef BH_INLINED_H
#define BH_INLINED_H

#define BH_INLINED_ACROSS __attribute__((always_inline)) inline

#endif
