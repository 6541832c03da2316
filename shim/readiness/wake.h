/* The wake-up of poll/select callers when a waiting fd's fate is decided:
 * a pool of eventfds, one per call in progress (wake.c says why not one
 * shared fd). */
#ifndef BH_READINESS_WAKE_H
#define BH_READINESS_WAKE_H

enum { BH_WAKE_NONE = -1 };

/* A waker of the pool for this call, armed (every bh_wake_all from now on
 * makes its fd readable; it may be readable already, from before);
 * BH_WAKE_NONE when the pool is used
 * up or no eventfd can be made: the caller then sleeps in short slices. */
int bh_wake_claim(void);
int bh_wake_fd(int waker);
void bh_wake_drain(int waker);
void bh_wake_release(int waker);

/* The table changed: wake every armed waker. */
void bh_wake_all(void);

/* After fork: the child closes its copies of the parent's eventfds. */
void bh_wake_reset(void);

#endif
