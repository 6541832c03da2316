/* Admission: the decision every connecting call makes before it goes out. */
#ifndef BH_GATE_H
#define BH_GATE_H

#include <sys/socket.h>

#include "admission/admission.h"  /* BH_GATE_PASS and the others */
#include "core/state.h"

/* A connect no rule matches, recorded under observe = yes: bh_gate_leave
 * tells the record how it went (core/observe.h). */
enum { BH_GATE_OBSERVED = -16 };

/* Before connect(), or sendto/sendmsg with MSG_FASTOPEN: returns the
 * place (core/joined.h) of the permit the fd now holds, or one of the
 * values above. Inline, the shim's gate word first (core/state.h): each
 * path then pays for one frame, its own. */
int bh_gate_enter_plainly(int fd, const struct sockaddr *to, socklen_t length);
int bh_gate_enter_not_plainly(int fd, const struct sockaddr *to, socklen_t length, int gate);
static inline int bh_gate_enter(int fd, const struct sockaddr *to, socklen_t length)
{
    int gate = atomic_load_explicit(&bh_shim.gate, memory_order_acquire);
    if (__builtin_expect(gate != BH_SHIM_GATE_PLAIN, 0))
        return bh_gate_enter_not_plainly(fd, to, length, gate);
    return bh_gate_enter_plainly(fd, to, length);
}
/* Before sendto/sendmsg with MSG_FASTOPEN under `bulkhead run`'s seccomp
 * supervisor: 1 (errno EOPNOTSUPP) when the destination is one a rule
 * matches, as the supervisor itself answers a Fast Open send it traps
 * (docs/seccomp.md): the program's fallback connect() is counted here,
 * once. 0 otherwise, and always when not supervised. */
int bh_gate_fastopen_declined(int fd, const struct sockaddr *to, socklen_t length);
/* After the real call, for whatever bh_gate_enter returned other than
 * PASS: a connection under way (success, EINPROGRESS, EINTR) keeps its
 * permit and any other failure gives it back at once; a successful
 * connect(AF_UNSPEC) gives the dissolved connection's permit back, so the
 * socket's next connect() is admitted afresh. The outcome, when known, is
 * told to outcome.c. errno is kept. */
void bh_gate_leave(int fd, int entered, int call_failed);

#endif
