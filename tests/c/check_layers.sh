#!/usr/bin/env bash
# The include rules of core/src's layers (docs/design.md), checked over the
# sources' #include "..." lines:
#   - every internal header has a layer, includes only headers of lower
#     layers and never internal.h (the umbrella);
#   - a converted source includes the headers it needs, never internal.h,
#     and none above its own layer; a lock family's file only the headers a
#     family sees (base, script, wait, holds, family), never the transport's
#     or the dispatcher's;
#   - a source not listed below is a lock family's file (a new family is
#     held to the family rule without being named here); a file listed as
#     not yet converted still includes internal.h (else it moves to the
#     converted list).
#
#   tests/c/check_layers.sh [core/src]
set -euo pipefail
src=${1:-"$(dirname "$0")/../../core/src"}

# Layers, lowest first: a header includes only headers of a lower rank.
rank() {
  case $1 in
    base.h) echo 0 ;;
    net.h | fiber.h) echo 1 ;;
    runtime.h) echo 2 ;;
    script.h) echo 3 ;;
    route.h) echo 4 ;;
    wait.h) echo 5 ;;
    holds.h) echo 6 ;;
    family.h) echo 7 ;;
    internal.h) echo 8 ;;
    *) echo -1 ;;
  esac
}

# What a lock family's file may include of the internal headers.
family_ok=" base.h script.h wait.h holds.h family.h "

# Converted sources other than the lock families and their layer (the
# highest header they may include). async.c runs every family's spec. Two
# front ends still drive connections themselves, and may include any
# header: redlock.c (its own nodes) and inspect.c (SCAN on each node).
converted="
errors.c base.h
slot.c base.h
url.c net.h
net.c net.h
tls.c net.h
fiber.c fiber.h
runtime.c runtime.h
util.c runtime.h
call.c route.h
client.c route.h
route.c route.h
cluster.c route.h
sentinel.c route.h
script.c wait.h
hub.c wait.h
stats.c holds.h
wait.c holds.h
renewal.c holds.h
hold.c holds.h
async.c family.h
adopt.c family.h
redlock.c family.h
inspect.c family.h
"

# Not yet converted: they include internal.h (none left).
pending=""

fail=0
bad() {
  echo "check_layers: $*" >&2
  fail=1
}
# The internal headers a file includes (#include "x.h" of core/src).
includes() {
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
    "$1" |
    while read -r h; do
      [ -f "$src/$h" ] && echo "$h"
    done
  return 0
}

for path in "$src"/*.h; do
  h=$(basename "$path")
  r=$(rank "$h")
  if [ "$r" -lt 0 ]; then
    bad "$h: a header without a layer (give it one here and in design.md)"
    continue
  fi
  [ "$h" = internal.h ] && continue
  for i in $(includes "$path"); do
    [ "$i" = internal.h ] && bad "$h includes internal.h"
    [ "$(rank "$i")" -lt "$r" ] || bad "$h includes $i, not a lower layer"
  done
done

listed=" $(echo "$converted" | awk 'NF { print $1 }' | tr '\n' ' ')"
listed="$listed $(echo $pending) "
families=""
for path in "$src"/*.c; do
  f=$(basename "$path")
  case $listed in
    *" $f "*) ;;
    *) families="$families$f family
" ;;
  esac
done

for f in $pending; do
  [ -f "$src/$f" ] || { bad "$f: listed but missing"; continue; }
  includes "$src/$f" | grep -qx internal.h ||
    bad "$f no longer includes internal.h: move it to the converted list"
done

while read -r f layer; do
  [ -n "$f" ] || continue
  [ -f "$src/$f" ] || { bad "$f: listed but missing"; continue; }
  for i in $(includes "$src/$f"); do
    if [ "$i" = internal.h ]; then
      bad "$f is converted but includes internal.h"
    elif [ "$layer" = family ]; then
      case $family_ok in
        *" $i "*) ;;
        *) bad "$f, a lock family, includes $i" ;;
      esac
    elif [ "$(rank "$i")" -lt 0 ] ||
      [ "$(rank "$i")" -gt "$(rank "$layer")" ]; then
      bad "$f (layer $layer) includes $i, a higher layer"
    fi
  done
done <<EOF
$converted
$families
EOF

[ "$fail" = 0 ] && echo "check_layers: ok"
exit "$fail"
