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
  rc += hilock_lock_try_acquire(l) + hilock_lock_acquire(l, 0) + hilock_lock_release(l) +
        hilock_lock_extend(l, 1, 1) + hilock_lock_renew(l);
  rc += hilock_rlock_try_acquire(rl) + hilock_rlock_acquire(rl, 0) + hilock_rlock_release(rl);
  rc += hilock_semaphore_try_acquire(s) + hilock_semaphore_acquire(s, 0) +
        hilock_semaphore_release(s) + hilock_semaphore_renew(s);
  rc += hilock_fair_lock_try_acquire(fl) + hilock_fair_lock_acquire(fl, 0) +
        hilock_fair_lock_release(fl) + hilock_fair_lock_extend(fl, 1, 1) +
        hilock_fair_lock_renew(fl);
  rc += hilock_rwlock_write_try_acquire(rw) + hilock_rwlock_write_acquire(rw, 0) +
        hilock_rwlock_write_release(rw) + hilock_rwlock_read_try_acquire(rw);
  rc += hilock_multi_lock_try_acquire(m) + hilock_multi_lock_acquire(m, 0) +
        hilock_multi_lock_release(m) + hilock_multi_lock_extend(m, 1, 1) +
        hilock_multi_lock_renew(m);
  rc += hilock_sequential_lock_try_acquire(sl) + hilock_sequential_lock_acquire(sl, 0) +
        hilock_sequential_lock_release(sl) + hilock_sequential_lock_extend(sl, 1, 1) +
        hilock_sequential_lock_renew(sl);
  rc += hilock_segmented_lock_try_acquire(sg) + hilock_segmented_lock_acquire(sg, 0) +
        hilock_segmented_lock_release(sg) + hilock_segmented_lock_extend(sg, 1, 1) +
        hilock_segmented_lock_renew(sg);
  rc += hilock_redlock_try_acquire(r) + hilock_redlock_acquire(r, 0) +
        hilock_redlock_release(r) + hilock_redlock_extend(r, 1, 1) + hilock_redlock_renew(r);
  rc += hilock_hold_held(HILOCK_HOLD(l)) + hilock_hold_renew(HILOCK_HOLD(r));
  return rc;
}
