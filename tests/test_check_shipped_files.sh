# Every shipped model and cluster passes `fusionc check`, one "ok" line each.
. "$(dirname "$0")/lib.sh"
files=(models/*.xml clusters/*.xml)
if "$FUSIONC" check "${files[@]}" >"$work/out" 2>"$work/err"; then pass; else fail "check failed: $(cat "$work/err")"; fi
expect_eq "ok lines" "${#files[@]}" "$(grep -c ': ok: ' "$work/out")"
expect_eq "stderr" "" "$(cat "$work/err")"
grep -q "local-4.xml: ok: cluster 'local-4': 2 regions, 4 hosts, 4 devices" "$work/out" && pass ||
  fail "local-4 summary: found '$(grep local-4 "$work/out")'"
finish
