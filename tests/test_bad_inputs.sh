# Every broken input in tests/bad/EXPECT is refused by `fusionc check`,
# `dump` and `stats`: exit status 1, one line on stderr,
# "FILE:LINE: error: ..." at the expected line with the expected words, and
# no sanitizer report.  Every file in tests/bad/ must have an EXPECT line.
. "$(dirname "$0")/lib.sh"

expect_file=tests/bad/EXPECT
min_cases=30
limit_s=10   # per fusionc run: every case here fails fast, or it is a bug

# Inputs made here, so the repository holds no binary file and no empty
# directory: "@gen/NAME" in EXPECT is $work/gen/NAME.
gen="$work/gen"
mkdir -p "$gen/directory.xml"
printf '\177ELF\002\001\001\000\000\000\000\000\000\000\000\000\003\000>\000' >"$gen/binary.xml"
printf '<?xml version="1.0"?>\n<model name="m">\000</model>\n' >"$gen/nul-on-line-2.xml"

sanitizer_words='Sanitizer|runtime error:|LeakSanitizer|AddressSanitizer|UndefinedBehavior'

# run_one COMMAND FILE LINE SUBSTRING ARGS...: one fusionc run, checked.
# For a cluster file, dump and stats must say so instead of SUBSTRING.
run_one() {
  local cmd=$1 file=$2 line=$3 want=$4
  shift 4
  local where="fusionc $cmd $file${*:+ $*}"
  timeout "$limit_s" "$FUSIONC" "$cmd" "$file" "$@" >"$work/out" 2>"$work/err"
  local rc=$? err n_lines
  err=$(cat "$work/err")
  n_lines=$(wc -l <"$work/err")
  checks=$((checks + 1))
  if grep -Eq "$sanitizer_words" "$work/err"; then
    fail "$where: sanitizer report: $(grep -Em1 "$sanitizer_words" "$work/err")"; return
  fi
  if [ "$rc" -eq 124 ]; then
    fail "$where: still running after $limit_s s (killed); expected a prompt error at line $line"; return
  fi
  if [ "$rc" -ne 1 ]; then
    fail "$where: expected exit status 1, found $rc (stderr: $(head -c 300 "$work/err"))"; return
  fi
  if [ "$cmd" = check ]; then
    if grep -q ': ok:' "$work/out"; then fail "$where: stdout says ok: $(head -c 200 "$work/out")"; return; fi
  elif [ -s "$work/out" ]; then
    fail "$where: expected nothing on stdout after a failure, found: $(head -c 200 "$work/out")"; return
  fi
  if [ "$n_lines" -ne 1 ]; then
    fail "$where: expected one line on stderr, found $n_lines: $(head -c 400 "$work/err")"; return
  fi
  local is_cluster=0
  grep -q '<cluster[ >]' "$file" 2>/dev/null && is_cluster=1
  if [ "$cmd" != check ] && [ "$is_cluster" = 1 ]; then
    # dump and stats take models: a cluster file is refused as one, at any line.
    if ! [[ "$err" =~ ^"$file":[0-9]+": error: ".*"cluster file" ]]; then
      fail "$where: expected '$file:LINE: error: ...cluster file...', found '$err'"
    fi
    return
  fi
  local prefix="$file:$line: error: "
  if [ "${err:0:${#prefix}}" != "$prefix" ]; then
    fail "$where: expected the message to start with '$prefix', found '$err'"; return
  fi
  case "$err" in
    *"$want"*) ;;
    *) fail "$where: expected '$prefix...$want...', found '$err'"; return ;;
  esac
}

n_cases=0
listed=" "
line_no=0
while IFS= read -r row || [ -n "$row" ]; do
  line_no=$((line_no + 1))
  case "$row" in ''|'#'*) continue ;; esac
  IFS=$'\t' read -r file line want args extra <<<"$row"
  if [ -z "$file" ] || [ -z "$want" ] || ! [[ "$line" =~ ^[0-9]+$ ]] || [ -n "${extra:-}" ]; then
    checks=$((checks + 1)); fail "$expect_file:$line_no: expected FILE<TAB>LINE<TAB>SUBSTRING[<TAB>ARGS], found '$row'"
    continue
  fi
  listed="$listed$file "
  [ "${file#@gen/}" != "$file" ] && file="$gen/${file#@gen/}"
  # shellcheck disable=SC2206
  argv=(${args:-})
  n_cases=$((n_cases + 1))
  for cmd in check dump stats; do
    run_one "$cmd" "$file" "$line" "$want" "${argv[@]}"
  done
done <"$expect_file"

# Every file in tests/bad/ is a case; a file nobody checks is dead weight.
for f in tests/bad/*; do
  [ "$f" = "$expect_file" ] && continue
  checks=$((checks + 1))
  case "$listed" in *" $f "*) ;; *) fail "$f has no line in $expect_file" ;; esac
done

checks=$((checks + 1))
[ "$n_cases" -ge "$min_cases" ] || fail "$expect_file: expected at least $min_cases cases, found $n_cases"
echo "$n_cases cases" >&2
finish
