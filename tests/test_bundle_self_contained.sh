# A bundle needs only the C library on its host (issue 7): every device
# program's libraries, but the C library's own files, are in its lib/
# folder, found through its $ORIGIN run path (codegen/bundle_libs.h).
#   - ldd on every device program of a 4-device compile resolves every
#     library either to the C library's own files or to the device's lib/,
#     and none is "not found";
#   - the devices' copies are one file (hard links), not four;
#   - a one-device bundle trains 2 steps inside a chroot that holds only
#     the C library's files (those ldd lists), the bundle and the data:
#     no OpenBLAS, nanomsg or OpenMP of the host's (in a mount and pid
#     namespace of its own, with /proc; a user namespace too when not root).
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

model=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=2 --set batch=4 --set seq=16)
"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/four" "${model[@]}" --scheduler uniform \
  --compress none >"$work/log" 2>&1 && pass || fail "compile for local-4: $(cat "$work/log")"
libc_own='^(libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libanl\.so|libresolv\.so|libutil\.so|libmvec\.so|ld-linux|linux-vdso)'
for d in cpu-a0 cpu-a1 cpu-b0 cpu-b1; do
  exe="$work/four/$d/fusion-$d"
  ldd "$exe" >"$work/ldd.$d" 2>&1 && pass || fail "$d: ldd failed: $(cat "$work/ldd.$d")"
  grep -q "not found" "$work/ldd.$d" && fail "$d: a library is not found: $(cat "$work/ldd.$d")" || pass
  outside=$(awk -v lib="$work/four/$d/lib/" -v own="$libc_own" '
    $2 == "=>" && $3 ~ /^\// { name = $1; path = $3
      if (name !~ own && index(path, lib) != 1) print name " => " path }' "$work/ldd.$d")
  expect_eq "$d: libraries outside the C library and the bundle" "" "$outside"
  bundled=$(awk -v lib="$work/four/$d/lib/" '$2 == "=>" && index($3, lib) == 1' "$work/ldd.$d" | wc -l)
  [ "$bundled" -ge 4 ] && pass || fail "$d: only $bundled libraries from the bundle (OpenBLAS, nanomsg, cJSON, xxHash at least): $(cat "$work/ldd.$d")"
done
links=$(stat -c %h "$work/four/cpu-a0/lib/libopenblas.so.0" 2>/dev/null || echo 0)
expect_eq "hard links to cpu-a0's libopenblas.so.0 (one a device)" 4 "$links"

# Train inside a root with nothing but the C library.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >"$work/log" 2>&1 \
  && pass || fail "compile for local-1: $(cat "$work/log")"
root="$work/root"
mkdir -p "$root/bundle" "$root/tmp"
cp -a "$work/one/cpu0/." "$root/bundle/"
ldd "$work/one/cpu0/fusion-cpu0" | awk -v own="$libc_own" '
  $2 == "=>" && $3 ~ /^\// && $1 ~ own { print $3 } $1 ~ /^\// { print $1 }' | while read -r f; do
  mkdir -p "$root$(dirname "$f")" && cp -L "$f" "$root$f"
done
head -c 200000 /usr/share/common-licenses/GPL-3 >"$root/data.txt"
[ ! -e "$root/usr/lib/x86_64-linux-gnu/libopenblas.so.0" ] && [ ! -e "$root/lib/x86_64-linux-gnu/libopenblas.so.0" ] \
  && pass || fail "the chroot holds the host's OpenBLAS"
# A mount namespace of its own with /proc and /dev/shm mounted inside the
# root, as on any real host (the loader reads /proc/self/exe to expand
# $ORIGIN; LLVM's OpenMP, in the clang build, wants /dev/shm); the
# namespace's end unmounts them.
mkdir -p "$root/proc" "$root/dev/shm"
as_root=(unshare -m -p -f); [ "$(id -u)" -eq 0 ] || as_root=(unshare -r -m -p -f)
if "${as_root[@]}" sh -c 'mount -t proc proc "$1/proc" && mount -t tmpfs tmpfs "$1/dev/shm" && exec chroot "$1" /bundle/fusion-cpu0 --data /data.txt --steps 2 --seed 1' \
     sh "$root" >"$work/chroot.out" 2>&1; then pass
else fail "training in a root with only the C library: $(tail -5 "$work/chroot.out")"; fi
expect_eq "steps trained in the chroot" 2 "$(grep -c '^step ' "$work/chroot.out")"
finish
