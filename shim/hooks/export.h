/* The one mark a hook carries: the shim exports only the libc names it
 * interposes (everything else is built -fvisibility=hidden). */
#ifndef BH_EXPORT_H
#define BH_EXPORT_H

#define BH_EXPORT __attribute__((visibility("default")))

#endif
