# Every C source of the tree is as clang-format (.clang-format at the root)
# writes it; a file that is not fails with the lines clang-format would change.
# Tables aligned by hand sit between `/* clang-format off */` and `on`.
. "$(dirname "$0")/lib.sh"
command -v clang-format >/dev/null || { fail "clang-format is not installed (scripts/install-deps.sh installs it)"; finish; }
[ -f .clang-format ] && pass || fail "no .clang-format at the root of $FUSION_SOURCE_DIR"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) -print)
fi
[ "${#files[@]}" -gt 100 ] && pass || fail "found only ${#files[@]} C sources"
if clang-format --dry-run --Werror "${files[@]}" >/dev/null 2>"$work/err"; then pass; else
  for f in $(grep -o '^[^:]*:[0-9]*:[0-9]*: error' "$work/err" | cut -d: -f1 | sort -u); do
    fail "$f is not as clang-format writes it (run: clang-format -i $f); first differences:
$(grep -m 2 -A 2 "^$f:" "$work/err")"
  done
  grep -q 'error' "$work/err" || fail "clang-format failed: $(head -5 "$work/err")"
fi

# The check can fail: a function brace moved up to its line is refused.
awk 'BEGIN { done = 0 } { if (!done && $0 == "{") { prev = prev " {"; done = 1; next } if (NR > 1) print prev; prev = $0 } END { print prev }' \
  runtime/exec.c >"$work/exec.c"
cp .clang-format "$work/"
if clang-format --dry-run --Werror "$work/exec.c" 2>/dev/null; then
  fail "clang-format accepted a misformatted copy of runtime/exec.c"
else pass; fi
finish
