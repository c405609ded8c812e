// The public headers compile as C++ (check_header_cxx, ctest): every
// family's typed wrappers over the hold's calls, HILOCK_HOLD of each
// handle type (a cast in C++), and the kinds' constructors. Compiled
// only (-fsyntax-only); nothing here runs.
#include <hilock/hilock.h>

int hilock_cxx_check(hilock_client *c, hilock_lock *l, hilock_rlock *rl,
                     hilock_semaphore *s, hilock_fair_lock *fl,
                     hilock_rwlock *rw, hilock_multi_lock *m,
                     hilock_sequential_lock *sl, hilock_segmented_lock *sg,
                     hilock_redlock *r);

int hilock_cxx_check(hilock_client *c, hilock_lock *l, hilock_rlock *rl,
                     hilock_semaphore *s, hilock_fair_lock *fl,
                     hilock_rwlock *rw, hilock_multi_lock *m,
                     hilock_sequential_lock *sl, hilock_segmented_lock *sg,
                     hilock_redlock *r) {
  int rc = 0;
  rc += hilock_lock_new(c, "n", 1, 1000, &l) + hilock_lock_new_simple(c, "n", 1, &l) +
        hilock_lock_new_lease(c, "n", 1, 1000, &l);
  rc += hilock_rlock_new_redisson(c, "n", 1, 1000, &rl) +
        hilock_rlock_new_redisson_fair(c, "n", 1, 1000, &rl) +
        hilock_rlock_new_redisson_read(c, "n", 1, 1000, &rl) +
        hilock_rlock_new_redisson_write(c, "n", 1, 1000, &rl);
  rc += hilock_hold_try_acquire(HILOCK_HOLD(l)) + hilock_hold_acquire(HILOCK_HOLD(l), 0) + hilock_hold_release(HILOCK_HOLD(l)) +
        hilock_hold_extend(HILOCK_HOLD(l), 1, 1) + hilock_hold_renew(HILOCK_HOLD(l));
  rc += hilock_hold_try_acquire(HILOCK_HOLD(rl)) + hilock_hold_acquire(HILOCK_HOLD(rl), 0) + hilock_hold_release(HILOCK_HOLD(rl));
  rc += hilock_hold_try_acquire(HILOCK_HOLD(s)) + hilock_hold_acquire(HILOCK_HOLD(s), 0) +
        hilock_hold_release(HILOCK_HOLD(s)) + hilock_hold_renew(HILOCK_HOLD(s));
  rc += hilock_hold_try_acquire(HILOCK_HOLD(fl)) + hilock_hold_acquire(HILOCK_HOLD(fl), 0) +
        hilock_hold_release(HILOCK_HOLD(fl)) + hilock_hold_extend(HILOCK_HOLD(fl), 1, 1) +
        hilock_hold_renew(HILOCK_HOLD(fl));
  rc += hilock_rwlock_write_try_acquire(rw) + hilock_rwlock_write_acquire(rw, 0) +
        hilock_rwlock_write_release(rw) + hilock_rwlock_read_try_acquire(rw);
  rc += hilock_hold_try_acquire(HILOCK_HOLD(m)) + hilock_hold_acquire(HILOCK_HOLD(m), 0) +
        hilock_hold_release(HILOCK_HOLD(m)) + hilock_hold_extend(HILOCK_HOLD(m), 1, 1) +
        hilock_hold_renew(HILOCK_HOLD(m));
  rc += hilock_hold_try_acquire(HILOCK_HOLD(sl)) + hilock_hold_acquire(HILOCK_HOLD(sl), 0) +
        hilock_hold_release(HILOCK_HOLD(sl)) + hilock_hold_extend(HILOCK_HOLD(sl), 1, 1) +
        hilock_hold_renew(HILOCK_HOLD(sl));
  rc += hilock_hold_try_acquire(HILOCK_HOLD(sg)) + hilock_hold_acquire(HILOCK_HOLD(sg), 0) +
        hilock_hold_release(HILOCK_HOLD(sg)) + hilock_hold_extend(HILOCK_HOLD(sg), 1, 1) +
        hilock_hold_renew(HILOCK_HOLD(sg));
  rc += hilock_hold_try_acquire(HILOCK_HOLD(r)) + hilock_hold_acquire(HILOCK_HOLD(r), 0) +
        hilock_hold_release(HILOCK_HOLD(r)) + hilock_hold_extend(HILOCK_HOLD(r), 1, 1) + hilock_hold_renew(HILOCK_HOLD(r));
  rc += hilock_hold_held(HILOCK_HOLD(l)) + hilock_hold_renew(HILOCK_HOLD(r));
  return rc;
}
