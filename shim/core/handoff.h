/* Permits across exec (handoff.c): what the next program image must know
 * about our permits, in one environment variable. */
#ifndef BH_HANDOFF_H
#define BH_HANDOFF_H

#define BH_HANDOFF_VARIABLE "BULKHEAD_HANDOFF"

/* What an exec hands to the next image: the environment to exec with,
 * "BULKHEAD_HANDOFF=..." in place of any old one, in a mapping of its own. */
struct bh_handoff {
    void *mapping;
    unsigned long mapped;
    char **envp;
};

/* 1 with handoff->envp set, or 0 when there is nothing to hand off. No
 * malloc, little stack: exec may run in a signal handler. */
int bh_handoff_encode(struct bh_handoff *handoff, char *const envp[]);
/* After a failed exec. */
void bh_handoff_release(struct bh_handoff *handoff);
/* At start-up, once the namespace is joined: what the previous image
 * handed over. */
void bh_handoff_adopt(void);

#endif
