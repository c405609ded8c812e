#!/usr/bin/env bash
# The shared library's exported functions, checked against the sources:
#   - at most MAX hilock_* functions are exported (the verbs every family
#     shares are hilock_hold_*; a family's header wraps them, and other
#     calls that only restate one, in static inline functions that are no
#     symbols of the library). MAX counts the shared layer and the nine
#     families of the verb set; each family after them (a handle type of
#     HILOCK_HOLD in hilock/hold.h) may add 8;
#   - every exported function is defined in core/src where grep finds it:
#     a line that starts with its return type and has NAME( on it (not a
#     declaration ending in ';'), never pasted together by a macro.
#
#   tests/c/check_exports.sh LIBRARY [core/src] [MAX]
set -euo pipefail
lib=$1
src=${2:-"$(dirname "$0")/../../core/src"}
max=${3:-125}
nm=${NM:-nm}
include=$src/../include/hilock

families=$(grep -cE '^ +struct hilock_[a-z_]+ \*: \(hilock_hold \*\)' "$include/hold.h" || true)
families=$((families - 1)) # hilock_hold itself
if [ "$families" -gt 9 ]; then max=$((max + 8 * (families - 9))); fi

names=$("$nm" -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^hilock_/ { print $3 }' | sort)
count=$(printf '%s\n' "$names" | grep -c . || true)
fail=0
if [ "$count" -gt "$max" ]; then
  echo "check_exports: $lib exports $count hilock_* functions, more than $max" >&2
  fail=1
fi
for name in $names; do
  if ! grep -E "^[^ #/*].*\\b$name\\(" "$src"/*.c | grep -qvE ';[[:space:]]*$'; then
    echo "check_exports: $name is exported but no line of $src/*.c defines it" >&2
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "check_exports: ok ($count exported, at most $max for $families families)"
exit "$fail"
