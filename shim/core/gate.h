/* Admission: the decision every connecting call makes before it goes out. */
#ifndef BH_GATE_H
#define BH_GATE_H

#include <sys/socket.h>

enum {
    BH_GATE_PASS = -1,     /* not ours to count: call libc as is */
    BH_GATE_REFUSED = -2,  /* compartment full: return -1, errno is set */
};

/* Before connect(), or sendto/sendmsg with MSG_FASTOPEN: returns the
 * compartment whose permit the fd now holds, or one of the values above. */
int bh_gate_enter(int fd, const struct sockaddr *to, socklen_t length);
/* After connect(AF_UNSPEC) returned rc: a connection it dissolved gives
 * its permit back, so the socket's next connect() is admitted afresh. */
int bh_gate_disconnected(int fd, int rc);
/* After the real call: a connection under way (success, EINPROGRESS,
 * EINTR) keeps its permit; any other failure gives it back at once. */
void bh_gate_leave(int fd, int call_failed);

#endif
