# Every command's options, as its --help lists them (runtime/cli_option.h
# prints the help from the same table it parses with): each option that
# takes a value takes it as `--x v` and as `--x=v` with the same outcome,
# a flag given a value is refused, and an option no command lists is
# refused naming it.  The device programs' options likewise.  Then a few
# real runs in both forms (the `compile --run-key=FILE` that was once
# refused while `--run-key FILE` worked).
. "$(dirname "$0")/lib.sh"

# options_of HELPFILE: one line an option of the help's option column:
# NAME and, when it takes one, its METAVAR ("--stages S, --replicas R"
# gives two; "-v, --verbose" two flags; "--out, -o FILE" two names of one
# option with a value).
options_of() {
  /usr/bin/python3 - "$1" <<'PYEOF'
import re, sys
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"^  (-\S.*?)(?:  |$)", line.rstrip("\n"))
    if not m:
        continue
    items = [i.split(" ", 1) for i in m.group(1).split(", ")]
    for k, item in enumerate(items):
        if not re.match(r"^--?[A-Za-z]", item[0]):
            break
        metavar = item[1] if len(item) > 1 else ""
        if not metavar and k + 1 < len(items) and len(items[k + 1]) > 1:
            metavar = items[k + 1][1]          # "--out, -o FILE": one option, two names
        print(item[0], metavar)
PYEOF
}

# run_one CMD...: its output (both streams) in $work/one.out, its status in one.rc.
run_one() { "$@" >"$work/one.out" 2>&1; echo $? >"$work/one.rc"; }

# check_program NAME HELPFILE RUNNER... : RUNNER ARGS runs the program with ARGS
# (and whatever makes it stop before any work, added by the runner).
check_program() {
  local name=$1 help=$2; shift 2
  local n=0
  while read -r opt metavar; do
    n=$((n + 1))
    if [ -n "$metavar" ]; then
      run_one "$@" "$opt" 0bogus
      local split_rc split_out
      split_rc=$(cat "$work/one.rc"); split_out=$(cat "$work/one.out")
      if grep -qE "unknown option|unexpected argument|bad option" "$work/one.out"; then
        fail "$name $opt 0bogus: refused as unknown: $(head -2 "$work/one.out")"; continue
      fi
      pass
      case $opt in --*) ;; *) continue ;; esac   # -o FILE: only the next argument
      run_one "$@" "$opt=0bogus"
      expect_eq "$name $opt=0bogus: the exit status of $opt 0bogus" "$split_rc" "$(cat "$work/one.rc")"
      expect_eq "$name $opt=0bogus: what $opt 0bogus says" "$split_out" "$(cat "$work/one.out")"
    else
      run_one "$@" "$opt"
      grep -qE "unknown option|unexpected argument|bad option" "$work/one.out" \
        && fail "$name $opt: refused as unknown: $(head -2 "$work/one.out")" || pass
      case $opt in --*) ;; *) continue ;; esac
      run_one "$@" "$opt=1"
      expect_eq "$name $opt=1 (a flag given a value): exit status" 2 "$(cat "$work/one.rc")"
      grep -q "option '$opt' takes no value" "$work/one.out" && pass \
        || fail "$name $opt=1: $(head -2 "$work/one.out")"
    fi
  done < <(options_of "$help")
  [ "$n" -gt 0 ] || [ "$name" = "fusionc passes" ] && pass || fail "$name: no options found in its --help"
  echo "$name: $n options, both forms" >&2
}

# fusionc's commands: each with no positional arguments, so that it stops
# at its usage once the options are read (profile: a bad --seconds at the
# end stops it before it measures).
commands=$("$FUSIONC" --help | sed -n '/^commands:/,/^$/p' | grep -oE '^  [a-z][a-z-]*' | tr -d ' ')
for cmd in $commands standby; do
  "$FUSIONC" "$cmd" --help >"$work/help.$cmd" 2>&1
  expect_eq "fusionc $cmd --help: exit status" 0 $?
  grep -q "^usage: fusionc $cmd" "$work/help.$cmd" && pass || fail "fusionc $cmd --help: $(head -1 "$work/help.$cmd")"
  case $cmd in
    profile) stop=(--seconds 0) ;;
    *) stop=() ;;
  esac
  fusionc_cmd() { "$FUSIONC" "$cmd" "$@" "${stop[@]}"; }
  check_program "fusionc $cmd" "$work/help.$cmd" fusionc_cmd
  # An option it does not list is refused, naming it (broker passes what
  # is not its own to the devices: not refused there).
  if [ "$cmd" != broker ] && [ "$cmd" != passes ]; then
    "$FUSIONC" "$cmd" --no-such-option >"$work/out" 2>&1
    expect_eq "fusionc $cmd --no-such-option: exit status" 2 $?
    grep -q "'--no-such-option'" "$work/out" && pass || fail "fusionc $cmd --no-such-option: $(head -1 "$work/out")"
  fi
done
# An option of one command is not another's.
"$FUSIONC" check models/mlp.xml --scheduler uniform >"$work/out" 2>&1
expect_eq "check --scheduler: exit status" 2 $?
grep -q "unknown option '--scheduler'" "$work/out" && pass || fail "check --scheduler: $(head -1 "$work/out")"

# A device program: its options, the same way (without --data it stops
# at its usage once they are read).
"$FUSIONC" compile models/mlp.xml clusters/local-1.xml -o "$work/mlp" >"$work/c.out" 2>&1 && pass \
  || fail "compile: $(cat "$work/c.out")"
device="$work/mlp/cpu0/fusion-cpu0"
"$device" --help >"$work/help.device" 2>&1
expect_eq "device --help: exit status" 0 $?
device_cmd() { "$device" "$@"; }
check_program "fusion-cpu0" "$work/help.device" device_cmd
"$device" --no-such-option >"$work/out" 2>&1
expect_eq "device --no-such-option: exit status" 2 $?
grep -q "unknown option '--no-such-option'" "$work/out" && pass || fail "device --no-such-option: $(head -1 "$work/out")"
"$device" --data=x --seed=-1 >"$work/out" 2>&1
expect_eq "device --seed=-1: exit status" 2 $?
grep -q "\-\-seed expects an unsigned integer, found '-1'" "$work/out" && pass || fail "device --seed=-1: $(head -1 "$work/out")"

# Real runs, both forms, the same result.
"$FUSIONC" compile models/mlp.xml clusters/local-1.xml -o "$work/k1" >/dev/null 2>&1
"$FUSIONC" compile models/mlp.xml clusters/local-1.xml -o "$work/k2" --run-key="$work/k1/run.key" >"$work/out" 2>&1
expect_eq "compile --run-key=FILE: exit status" 0 $?
cmp -s "$work/k1/run.key" "$work/k2/run.key" && pass || fail "compile --run-key=FILE: the key was not used: $(cat "$work/out")"
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml --set layers=2 --set vocab=256 --stages 2 --replicas 2 \
  --micro-batches 2 -o "$work/p1" >"$work/p1.out" 2>&1
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml --set=layers=2 --set=vocab=256 --stages=2 --replicas=2 \
  --micro-batches=2 -o "$work/p1" >"$work/p2.out" 2>&1
expect_eq "plan --stages=2 --replicas=2 ...: the plan of --stages 2 --replicas 2" "$(cat "$work/p1.out")" "$(cat "$work/p2.out")"
grep -q "2 stages x 2 replicas\|stages: 2" "$work/p1.out" && pass || fail "plan --stages 2: $(head -5 "$work/p1.out")"
finish
