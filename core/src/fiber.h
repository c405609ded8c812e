/* hilock internals, fibers (fiber.c): the stacks an event loop's
 * operations run on. Uses the base layer only; net.c and the runtime wait
 * through it. */
#ifndef HILOCK_FIBER_H
#define HILOCK_FIBER_H

#include <stdint.h>

#include "base.h"

/* ## Fibers (fiber.c) ----------------------------------------------------
 * An operation of an event loop's runner (async.c) runs on the loop's own
 * thread, on a stack of its own. Where the blocking code would wait (a
 * socket in net.c, a pause, a pooled connection), it calls
 * hilock__fiber_wait instead, which gives the thread back to whoever
 * resumed the fiber; the runner resumes it when the socket is ready or the
 * time is up. Only the thread that made a fiber resumes it. */
typedef struct hilock__fiber hilock__fiber;
/* The fiber running on this thread, or NULL. */
hilock__fiber *hilock__fiber_self(void);
/* A fiber that will run fn(arg) when first resumed; NULL: out of memory. */
hilock__fiber *hilock__fiber_new(void (*fn)(void *), void *arg);
/* Run f until it waits or ends; revents: what its wait got (a poll
 * revents mask; 0 the time ran out). 1 if it ended (then free it), else
 * 0. */
int hilock__fiber_resume(hilock__fiber *f, int revents);
void hilock__fiber_free(hilock__fiber *f);
/* In a fiber: wait for events on fd (-1: none, a pause) until deadline_ms
 * (INT64_MAX: none). Returns the revents, 0 when the time ran out. */
int hilock__fiber_wait(int fd, short events, int64_t deadline_ms);
/* What f waits for (valid while it is suspended). */
void hilock__fiber_waits(const hilock__fiber *f, int *fd, short *events,
                         int64_t *deadline_ms);
/* The argument f runs with; bring f's wait to an end by deadline_ms (while
 * it is suspended: its resumer wakes it then, with no events). */
void *hilock__fiber_arg(const hilock__fiber *f);
void hilock__fiber_cut(hilock__fiber *f, int64_t deadline_ms);

#endif /* HILOCK_FIBER_H */
