/* Exits (exit.c): counted connections are closed before their permits go
 * back, so that no other process is admitted while they are still open. */
#ifndef BH_EXIT_H
#define BH_EXIT_H

/* A normal exit: closes every counted connection, then gives its permit
 * back; flushes stdio output pending on them first if asked. */
void bh_exit_close_connections(int flush_streams);

#endif
