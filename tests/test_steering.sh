# Runs a person can steer (issue 33, items 4-8): what the tools say and
# refuse so that a run does what its user meant.
#   - compile -o into an earlier compile is refused naming --force, which
#     empties it first; a folder without one is never emptied;
#   - plan and simulate write nothing to the current folder without -o;
#   - fusionc --version names the commit and the libraries' versions;
#   - a model's <hyper> that nothing reads (learnig_rate) is refused with
#     the nearest known name, and a host address that is no address is
#     refused at check and compile, naming it;
#   - a plan that leaves devices idle names them and why, in numbers;
#   - a device waiting for its peers says for whom; launch-local names the
#     signal of a device that was killed;
#   - the report's link panels have titles of their own, and the HTML
#     view's search colour is no stage's.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
claim_ports
small=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=16 --set heads=2 --set batch=8 --set seq=16)

# compile -o: an earlier compile is refused, --force empties it, other files are never touched.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/out" "${small[@]}" >/dev/null 2>&1 && pass || fail "first compile"
touch "$work/out/stale-file"
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/out" "${small[@]}" >/dev/null 2>"$work/err"
expect_eq "compile over an earlier compile: exit" 1 $?
grep -q "out:0: error: the output folder holds an earlier compile: give --force to empty it first" "$work/err" && pass \
  || fail "over an earlier compile: $(cat "$work/err")"
[ -e "$work/out/stale-file" ] && pass || fail "the refused compile removed a file"
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/out" "${small[@]}" --force >/dev/null 2>"$work/err" \
  && pass || fail "--force: $(cat "$work/err")"
[ ! -e "$work/out/stale-file" ] && [ -x "$work/out/cpu0/fusion-cpu0" ] && pass || fail "--force did not empty the folder first"
mkdir -p "$work/mine" && echo keep >"$work/mine/notes.txt"
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/mine" "${small[@]}" --force >/dev/null 2>"$work/err" \
  && pass || fail "compile --force into a folder of other files: $(cat "$work/err")"
expect_eq "a folder with no earlier compile is not emptied, even with --force" keep "$(cat "$work/mine/notes.txt")"

# plan and simulate: nothing written to the current folder without -o.
mkdir -p "$work/cwd"
(cd "$work/cwd" && "$FUSIONC" plan "$FUSION_SOURCE_DIR/models/mlp.xml" "$FUSION_SOURCE_DIR/clusters/local-4.xml" >/dev/null 2>&1 \
  && "$FUSIONC" simulate "$FUSION_SOURCE_DIR/models/mlp.xml" "$FUSION_SOURCE_DIR/clusters/local-4.xml" >/dev/null 2>&1) \
  && pass || fail "plan or simulate failed"
expect_eq "files plan and simulate left in the current folder" "" "$(ls -A "$work/cwd")"
"$FUSIONC" plan models/mlp.xml clusters/local-4.xml -o "$work/p" >/dev/null 2>&1
[ -s "$work/p/plan.txt" ] && [ -s "$work/p/plan.svg" ] && pass || fail "plan -o wrote no plan.txt/plan.svg"

# --version: the commit (or why there is none) and the libraries.
"$FUSIONC" --version >"$work/v" 2>&1 && pass || fail "--version exit"
grep -Eq '^fusionc [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{12}(\+changes)?|unknown .*)\)$' "$work/v" && pass || fail "--version: $(head -1 "$work/v")"
commit=$(git -C "$FUSION_SOURCE_DIR" rev-parse --short=12 HEAD 2>/dev/null || true)
[ -z "$commit" ] || grep -q "(commit $commit" "$work/v" && pass || fail "--version names $(head -1 "$work/v"), HEAD is $commit"
for lib in "LLVM      [0-9]+\.[0-9]+" "OpenBLAS  OpenBLAS [0-9]+\.[0-9]+" "libsodium [0-9]+\.[0-9]+" "nanomsg   [0-9]+\.[0-9]+" \
  "libxml2   [0-9]+\.[0-9]+"; do
  grep -Eq "^  $lib" "$work/v" && pass || fail "--version lacks '$lib': $(cat "$work/v")"
done

# A hyper-parameter nothing reads: refused at its line, with the nearest name.
sed 's|<hyper name="lr"  *value="1e-3"/>|<hyper name="learnig_rate" value="1e-3"/>|' models/mlp.xml >"$work/typo.xml"
grep -q learnig_rate "$work/typo.xml" || fail "the typo model was not made (models/mlp.xml changed?)"
line=$(grep -n learnig_rate "$work/typo.xml" | cut -d: -f1)
"$FUSIONC" check "$work/typo.xml" >/dev/null 2>"$work/err"; expect_eq "an unread hyper-parameter: exit" 1 $?
grep -q "typo.xml:$line: error: hyper-parameter 'learnig_rate' is read by nothing: .*; did you mean 'lr' (what fusion calls learning_rate)? (the names read: lr, beta1" \
  "$work/err" && pass || fail "unread hyper-parameter: $(cat "$work/err")"
for m in models/*.xml tests/models/*.xml; do
  "$FUSIONC" check "$m" >/dev/null 2>"$work/err" && pass || fail "$m: $(cat "$work/err")"
done

# A host address that is no address: refused at check and compile, named.
sed 's|address="127.0.0.1"|address="127.0.123456789012"|' clusters/local-1.xml >"$work/bad-address.xml"
for cmd in check compile; do
  if [ $cmd = check ]; then "$FUSIONC" check "$work/bad-address.xml" >/dev/null 2>"$work/err"
  else "$FUSIONC" compile models/mlp.xml "$work/bad-address.xml" -o "$work/bad" >/dev/null 2>"$work/err"; fi
  expect_eq "$cmd of a bad address: exit" 1 $?
  grep -q "bad-address.xml:[0-9]*: error: host '[a-z0-9-]*': address '127.0.123456789012' is not an IPv4 address" "$work/err" \
    && pass || fail "$cmd of a bad address: $(cat "$work/err")"
done
[ ! -e "$work/bad" ] && pass || fail "a refused compile left $work/bad"
for good in 10.1.2.3 node-7.lab.example.org "[::1]" fe80::1; do
  sed "s|address=\"127.0.0.1\"|address=\"$good\"|" clusters/local-1.xml >"$work/good.xml"
  "$FUSIONC" check "$work/good.xml" >/dev/null 2>"$work/err" && pass || fail "address $good refused: $(cat "$work/err")"
done

# Idle devices named, with the reason in numbers.
demo=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=8 --set seq=64)
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml "${demo[@]}" >"$work/plan.out" 2>&1 && pass || fail "plan: $(cat "$work/plan.out")"
grep -q "^idle: cpu-b0, cpu-b1: their 20 Mbps, 40 ms link to cpu-a[01] costs more than they would add.$" "$work/plan.out" \
  && pass || fail "no idle line: $(cat "$work/plan.out")"
grep -Eq "^  With every device the best plan found \([0-9] stages? x [0-9] replicas?\) estimates [0-9.]+ ms a step, this plan [0-9.]+ ms.$" \
  "$work/plan.out" && pass || fail "no comparison: $(cat "$work/plan.out")"
sed -n 's/^  With every device.* estimates \([0-9.]*\) ms a step, this plan \([0-9.]*\) ms.$/\1 \2/p' "$work/plan.out" |
  awk '{ exit !($1 > $2) }' && pass \
  || fail "the plan with every device should be the slower: $(grep 'With every' "$work/plan.out")"
"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml "${demo[@]}" -o "$work/four" >"$work/compile.out" 2>&1
grep -q "^compiled gpt2 for local-4: 2 device programs" "$work/compile.out" && grep -q "^idle: cpu-b0, cpu-b1: their" "$work/compile.out" \
  && pass || fail "compile does not say why 2 of 4: $(cat "$work/compile.out")"
"$FUSIONC" plan models/gpt2.xml clusters/local-1.xml "${demo[@]}" 2>&1 | grep -q "^idle" && fail "idle devices on a one-device plan" || pass

# A device waiting for its peers says for whom; a killed device's signal is named.
"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml "${small[@]}" --stages 2 --replicas 1 --port-base "$ports" \
  -o "$work/two" >/dev/null 2>&1 && pass || fail "compile two stages"
head -c 20000 /usr/share/common-licenses/GPL-3 >"$work/corpus.txt"
timeout 30 "$work/two/cpu-a0/fusion-cpu-a0" --data "$work/corpus.txt" --steps 1 --connect-timeout 12 >"$work/wait.out" 2>&1
grep -q "^fusion: cpu-a0: waiting 10 s for cpu-a1 (at 127.0.0.1, to connect to port $ports here) (gives up after 12 s)$" \
  "$work/wait.out" && pass || fail "no word while waiting: $(cat "$work/wait.out")"
grep -q "error: cpu-a0: peer cpu-a1 (at 127.0.0.1, to connect to port $ports here) did not connect within 12000 ms" \
  "$work/wait.out" && pass || fail "the peer that never came is not named with its address: $(cat "$work/wait.out")"
"$work/two/launch-local.sh" --data "$work/corpus.txt" --steps 100000 >"$work/kill.out" 2>&1 &
launcher=$!
for _ in $(seq 1 100); do grep -q "^\[cpu-a1\] step " "$work/kill.out" && break; sleep 0.2; done
pkill -KILL -f "$work/two/cpu-a0/fusion-cpu-a0"
wait $launcher
grep -q "^launch-local: cpu-a0 failed: killed by SIGKILL" "$work/kill.out" && pass || fail "kill reason: $(tail -3 "$work/kill.out")"
grep -q "^launch-local: cpu-a[01] failed: $" "$work/kill.out" && fail "an empty reason: $(tail -3 "$work/kill.out")" || pass

# The report's link panels and the view's search colour.
"$work/two/launch-local.sh" --data "$work/corpus.txt" --steps 3 --log "$work/two.jsonl" >/dev/null 2>&1 && pass || fail "run for the report"
[ -s "$work/two.cpu-a0.jsonl" ] && [ -s "$work/two.cpu-a1.jsonl" ] && pass || fail "logs are not train.<device>.jsonl: $(ls "$work")"
"$FUSIONC" report "$work"/two.*.jsonl -o "$work/report" >/dev/null 2>&1 && pass || fail "report"
expect_eq "links.png's panel titles" "sent a step|time busy sending" \
  "$(awk '/set output .*links.png/ { on = 1 } on && /^set title/ { sub(/^set title /, ""); gsub(/'"'"'/, ""); print }' \
    "$work/report/plots.gnuplot" | paste -sd'|')"
search=$(sed -n 's/^\.box\.hit rect\.front { stroke: \(#[0-9a-f]*\);.*/\1/p' ir/html_view.css)
[ -n "$search" ] && ! grep "STAGE_COLOURS = " ir/html_view.js | grep -qi "'$search'" && pass \
  || fail "the search colour '$search' is empty or a stage's: $(grep 'STAGE_COLOURS = ' ir/html_view.js)"
finish
