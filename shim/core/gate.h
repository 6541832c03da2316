/* Admission: the decision every connecting call makes before it goes out. */
#ifndef BH_GATE_H
#define BH_GATE_H

#include <sys/socket.h>

enum {
    BH_GATE_PASS = -1,       /* not ours to count: call libc as is */
    BH_GATE_REFUSED = -2,    /* compartment full: return -1, errno is set */
    BH_GATE_DISCONNECT = -3, /* connect(AF_UNSPEC) of a counted socket */
    BH_GATE_AGAIN = -4,      /* connect() again on a counted socket still
                                connecting: only its outcome is learned */
};

/* Before connect(), or sendto/sendmsg with MSG_FASTOPEN: returns the
 * compartment whose permit the fd now holds, or one of the values above. */
int bh_gate_enter(int fd, const struct sockaddr *to, socklen_t length);
/* After the real call, for whatever bh_gate_enter returned other than
 * PASS: a connection under way (success, EINPROGRESS, EINTR) keeps its
 * permit and any other failure gives it back at once; a successful
 * connect(AF_UNSPEC) gives the dissolved connection's permit back, so the
 * socket's next connect() is admitted afresh. The outcome, when known, is
 * told to outcome.c. errno is kept. */
void bh_gate_leave(int fd, int entered, int call_failed);

#endif
