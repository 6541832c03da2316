/* Deadlines on counted connections: connect_timeout_ms and io_timeout_ms,
 * kept by the kernel, set through socket options. */
#ifndef BH_DEADLINE_H
#define BH_DEADLINE_H

#include <sys/socket.h>

#include "config/config.h"

/* TCP_USER_TIMEOUT = ms; errno is kept. */
void bh_deadline_set_user_timeout(int fd, int ms);

/* Before connect(): unanswered SYNs fail it after connect_timeout_ms.
 * Inline, as the next: a compartment without deadlines pays a test. */
static inline void bh_deadline_before_connect(int fd,
                                              const struct bh_compartment *compartment)
{
    if (compartment->connect_timeout_ms > 0)
        bh_deadline_set_user_timeout(fd, compartment->connect_timeout_ms);
}

/* Established: unacknowledged data fails it after io_timeout_ms (or the
 * kernel's default again, when only connect_timeout_ms is set). */
static inline void bh_deadline_established(int fd, const struct bh_compartment *compartment)
{
    if (compartment->io_timeout_ms != compartment->connect_timeout_ms)
        bh_deadline_set_user_timeout(fd, compartment->io_timeout_ms);
}
/* The first receive: SO_RCVTIMEO = io_timeout_ms, unless the program's
 * own is shorter. 1 when the socket's receive timeout is now ours. */
int bh_deadline_arm_receive(int fd, const struct bh_compartment *compartment);
/* The program sets SO_RCVTIMEO on a connection with io_timeout_ms: the
 * shorter of the two is set. 1 when that is ours. */
int bh_deadline_set_receive(int fd, const struct bh_compartment *compartment,
                            const void *value, socklen_t length, int *rc);
/* A receive failed with EAGAIN: was the call meant to block? */
int bh_deadline_call_blocks(int fd, int flags);

#endif
