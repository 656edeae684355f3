#!/usr/bin/env bash
# bench_diloco: do the far devices pay, measured on this machine, side by
# side in one run.  clusters/local-4.xml (two sites of two CPU devices, a
# 20 Mbps / 40 ms link between them) with its devices' peaks set to 4
# GFLOPS, every run with --emulate-links and --emulate-devices, the demo's
# GPT (4 layers, d 128, byte-level, the licence texts) at 16 rows of 64
# tokens a step, fp32.  Why 4 GFLOPS: local-4's 50 are more than four
# processes get from two cores; at 6 the four paced processes kept the
# cores 94% busy and ran 9% over their pacing, at 12 the cores, not the
# pacing, set their speed (docs/distributed.md).  Why 16 rows: each site's
# share (8 rows) keeps its two devices as busy as the whole batch keeps
# one site (8 + 8 rows take half of 16), where 4 + 4 paid a third more
# than half (the pipeline's fill and the update do not shrink with the
# rows).
#
#   site     the best single site alone (siteA, exact), S steps: its wall
#            time and its loss (mean of the last 20 steps)
#   exact    all four devices, exact mode, S steps (OP-Fence's plan)
#   diloco   all four devices, --sync diloco tuned for this scale: the
#            batch split 8 + 8, H 1, 4-bit rows with error feedback, one
#            round of delay (each step's change crosses the 20 Mbps link
#            while the next step runs, and is applied after it), plain
#            averaging (outer lr 1, momentum 0); 1.2 S steps: when its loss
#            (the sites' mean, smoothed over 20 steps) first reaches the
#            site's, and that time over the site's (target <= 0.7)
#   defaults --sync diloco with the planner's choices (H from the links,
#            at least 10; 8-bit rows; DiLoCo's outer lr 0.7, momentum 0.9),
#            S steps: what DiLoCo's settings for large models give here
#   quality  diloco's and exact's losses at equal tokens (step S of each:
#            both train 16 rows a step; target: within 3%)
#   predict  each run's measured time a step against `fusionc simulate`'s
#            (target: within 20%)
#
# Prints one line a figure: what, value, unit, anchor, ratio.  About eleven
# minutes on two cores.  Not a ctest test.
# usage: bench/bench_diloco.sh [BUILD_DIR] [S]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
S=${2:-300}
fusionc="$build/fusionc"
export OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat /usr/share/common-licenses/* > "$work/corpus.txt"
row() { printf '%-52s %10s %-7s %-30s %s\n' "$@"; }
gpt=(models/gpt2.xml --set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=16
     --set seq=64 --set lr=2e-3 --set warmup=20)
port=$((33000 + ($$ % 200) * 40))

# local-4 with slower devices, and its siteA alone, as cluster files.
sed -E 's/(peak-[a-z0-9]+)="[0-9.]+GFLOPS"/\1="4GFLOPS"/g' clusters/local-4.xml >"$work/four.xml"
/usr/bin/python3 - "$work/four.xml" "$work/site.xml" <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
a = s.index('<region name="siteA"'); b = s.index('</region>', a) + len('</region>')
open(sys.argv[2], 'w').write(s[:s.index('<cluster')] + '<cluster name="siteA">\n  ' + s[a:b] + '\n</cluster>\n')
EOF

# run NAME CLUSTER STEPS COMPILE-OPTIONS...: compile, simulate, train; the
# reporters' logs in $work/NAME/logs.
run() {
  local name=$1 cluster=$2 steps=$3; shift 3
  "$fusionc" compile "${gpt[@]}" "$cluster" -o "$work/$name" --port-base $port "$@" >"$work/$name.compile"
  port=$((port + 20))
  "$fusionc" simulate "${gpt[@]}" "$cluster" "$@" -o "$work" >"$work/$name.sim"
  "$work/$name/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --seed 3 --emulate-links \
    --emulate-devices >"$work/$name.out" 2>&1
}
# losses NAME: "step cumulative_ms loss" of the run, the mean over its sites'
# reporters (each logs its site's loss; exact mode has one).
losses() {
  local name=$1 files=()
  for d in $(sed -n 's/^device //p' "$work/$name/deploy.txt"); do
    grep -q '^step .*loss' "$work/$name/logs/$d.log" && files+=("$work/$name/logs/$d.log")
  done
  awk '/^step +[0-9]+\/[0-9]+ +loss/ { split($2, a, "/"); n = a[1]; loss[n] += $4; k[n]++
         match($0, /[0-9.]+ ms\/step/); v = substr($0, RSTART, RLENGTH) + 0; if (v > ms[n]) ms[n] = v }
       END { t = 0; for (i = 1; i in loss; i++) { t += ms[i]; printf "%d %.3f %.6f\n", i, t, loss[i] / k[i] } }' "${files[@]}"
}
smooth() { awk '{ s[NR] = $3; sum += $3; if (NR > 20) sum -= s[NR - 20]; n = NR < 20 ? NR : 20; printf "%d %.3f %.6f\n", $1, $2, sum / n }'; }
sim_ms() { sed -n 's/^simulated step: \([0-9.]*\) ms.*/\1/p' "$1"; }

run site "$work/site.xml" "$S"
run exact "$work/four.xml" "$S"
run diloco "$work/four.xml" $((6 * S / 5)) --sync diloco --local-steps 1 --outer-codec int4 --outer-delay 1 \
  --outer-lr 1 --outer-momentum 0
run defaults "$work/four.xml" "$S" --sync diloco
for n in site exact diloco defaults; do losses $n >"$work/$n.loss"; smooth <"$work/$n.loss" >"$work/$n.smooth"; done

site_ms=$(tail -1 "$work/site.loss" | awk '{ print $2 }')
site_loss=$(tail -1 "$work/site.smooth" | awk '{ print $3 }')
row "site alone (siteA, exact): $S steps" "$site_ms" "ms" "loss $site_loss (last 20 mean)" ""
for n in exact diloco defaults; do
  reach=$(awk -v L="$site_loss" '$3 <= L { print $1, $2; exit }' "$work/$n.smooth")
  if [ -n "$reach" ]; then
    set -- $reach
    row "$n: reaches the site's loss at step $1" "$2" "ms" "site alone $site_ms ms" \
      "$(awk -v a="$2" -v b="$site_ms" 'BEGIN { printf "%.3fx (target <= 0.7 for diloco)", a / b }')"
  else
    row "$n: never reaches the site's loss" "-" "" "last $(tail -1 "$work/$n.smooth" | awk '{ print $3 }')" "MISSED"
  fi
done
# Equal tokens: exact's S steps of 16 rows; diloco's S steps of 8 + 8.
exact_l=$(sed -n "${S}p" "$work/exact.smooth" | awk '{ print $3 }')
for n in diloco defaults; do
  at=$S
  l=$(sed -n "${at}p" "$work/$n.smooth" | awk '{ print $3 }')
  row "$n: loss at exact's tokens (step $at)" "$l" "" "exact $exact_l" \
    "$(awk -v a="$l" -v b="$exact_l" 'BEGIN { d = (a - b) / b; printf "%+.2f%% (target within 3%%)", 100 * d }')"
done
for n in site exact diloco defaults; do
  measured=$(awk '{ t = $2; n = $1 } END { printf "%.2f", t / n }' "$work/$n.loss")
  predicted=$(sim_ms "$work/$n.sim")
  row "$n: a global batch, measured vs simulated" "$measured" "ms" "simulate $predicted ms" \
    "$(awk -v a="$measured" -v b="$predicted" 'BEGIN { printf "%.3fx (target 0.8-1.2)", a / b }')"
done
grep -h "^H = \|^site [01]:\|^outer exchange" "$work/diloco/plan.txt" "$work/defaults/plan.txt" | sed 's/^/  /'
