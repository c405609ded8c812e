/* hilock: symbol visibility. */
#ifndef HILOCK_EXPORT_H
#define HILOCK_EXPORT_H

#if defined(_WIN32)
#  define HILOCK_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define HILOCK_API __attribute__((visibility("default")))
#else
#  define HILOCK_API
#endif

#endif /* HILOCK_EXPORT_H */
