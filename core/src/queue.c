/* What the queue families (the fair and the sequential lock) share at the
 * start of an acquire; their waiting is hilock__spec_queue's (wait.c). */
#include "internal.h"

int hilock__queue_begin(hilock__hold *h, char *id) {
  if (h->held && hilock__hold_validity_ms(h) > 0 && h->pid == hilock__pid())
    return hilock__set_err(&h->err, HILOCK_EINVAL,
                           "this handle already holds the lock; release it "
                           "first (the lock is not reentrant)");
  hilock__hold_drop(h);
  return hilock__token(id, &h->err);
}
