# The data a device program trains on (runtime/data.h): llm.c token shards
# of version 1 (uint16 ids) and 2 (uint32 ids) train alike; ids above
# 65,535 arrive whole; every bad file is refused when it is opened, one
# line naming it and what is wrong, exit 1, before step 1 (a damaged
# magic, a header count that disagrees with the size either way, a version
# other than 1 or 2, a count of 0, an id outside the model's vocabulary);
# --data-format text reads what auto refuses, --data-format shard refuses
# text.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

head -c 30000 /usr/share/common-licenses/GPL-3 >"$work/corpus.txt"   # starts with spaces: magic 0x20202020
small=(--set ctx=16 --set layers=1 --set dim=16 --set heads=2 --set batch=2 --set seq=16 --set lr=3e-3)
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/b256" --set vocab=256 "${small[@]}" \
  >"$work/compile.out" 2>&1 && pass || fail "compile (vocab 256): $(cat "$work/compile.out")"
exe="$work/b256/cpu0/fusion-cpu0"

# shard VERSION COUNT-OR-'' < ids-as-bytes: a shard of the bytes on stdin (count: theirs unless given).
shard() {
  perl -e 'my ($v, $c) = @ARGV; local $/; my @t = unpack("C*", <STDIN>);
           print pack("l<256", 20240520, $v, $c eq "" ? scalar(@t) : $c, (0) x 253), pack($v == 2 ? "L<*" : "S<*", @t)' "$@"
}
losses() { awk '/^step /{print $4}'; }

# refused WHAT EXPECTED-TEXT ARGS...: exit 1, the message, and no step ran.
refused() {
  local what=$1 text=$2; shift 2
  "$exe" --steps 2 "$@" >"$work/out" 2>"$work/err"
  expect_eq "$what: exit status" 1 $?
  grep -qF -- "$text" "$work/err" && pass || fail "$what: expected '$text' in: $(cat "$work/err")"
  expect_eq "$what: lines of error" 1 "$(wc -l <"$work/err")"
  expect_eq "$what: steps run" 0 "$(grep -c '^step ' "$work/out")"
}

# Version 1 and version 2 of the same ids train as the text they came from, bit for bit.
"$exe" --data "$work/corpus.txt" --steps 4 --seed 5 | losses >"$work/text.losses"
shard 1 '' <"$work/corpus.txt" >"$work/v1.bin"
shard 2 '' <"$work/corpus.txt" >"$work/v2.bin"
expect_eq "v2 shard size" $((1024 + 4 * 30000)) "$(stat -c %s "$work/v2.bin")"
"$exe" --data "$work/v1.bin" --steps 4 --seed 5 | losses >"$work/v1.losses"
"$exe" --data "$work/v2.bin" --steps 4 --seed 5 | losses >"$work/v2.losses"
expect_eq "steps trained" 4 "$(wc -l <"$work/text.losses")"
expect_eq "v1 shard losses (as the text's)" "$(cat "$work/text.losses")" "$(cat "$work/v1.losses")"
expect_eq "v2 shard losses (as the v1 shard's)" "$(cat "$work/v1.losses")" "$(cat "$work/v2.losses")"
"$exe" --data "$work/v2.bin" --data-format shard --steps 1 >/dev/null 2>"$work/err" \
  && pass || fail "--data-format shard on a shard: $(cat "$work/err")"

# Refused when opened, naming the file.
perl -e 'print pack("l<", 20240521)' >"$work/damaged.bin"; tail -c +5 "$work/v1.bin" >>"$work/damaged.bin"
refused "a damaged magic" \
  "damaged.bin: not a token shard (magic 20240521, expected 20240520) and not text (NUL byte at offset 5)" \
  --data "$work/damaged.bin"
head -c 2000 "$work/v1.bin" >"$work/cut.bin"
refused "a shard cut short" \
  "cut.bin: token shard is too short: its header counts 30000 tokens of 2 bytes (61024 bytes with the header), the file has 2000" \
  --data "$work/cut.bin"
cp "$work/v2.bin" "$work/long.bin"; printf 'xyz' >>"$work/long.bin"
refused "trailing bytes" \
  "long.bin: token shard has 3 trailing bytes: its header counts 30000 tokens of 4 bytes (121024 bytes with the header), the file has 121027" \
  --data "$work/long.bin"
head -c 100 "$work/v1.bin" >"$work/header.bin"
refused "a cut header" "header.bin: token shard is too short: it ends inside its 1024-byte header (100 bytes)" \
  --data "$work/header.bin"
printf 'abc' | shard 3 '' >"$work/v3.bin"
refused "version 3" "v3.bin: token shard version 3, expected 1 (uint16 ids) or 2 (uint32 ids)" --data "$work/v3.bin"
printf '' | shard 1 0 >"$work/empty.bin"
refused "a count of 0" "empty.bin: token shard claims 0 tokens (the count must be above 0)" --data "$work/empty.bin"
printf '' | shard 2 -5 >"$work/negative.bin"
refused "a count of -5" "negative.bin: token shard claims -5 tokens" --data "$work/negative.bin"
# An id outside the vocabulary (256): found when the file opens, at its position in that file.
perl -e 'my @t = map { $_ % 200 } 0 .. 999; $t[123] = 70000;
         print pack("l<256", 20240520, 2, 1000, (0) x 253), pack("L<*", @t)' >"$work/big.bin"
refused "id 70000" "big.bin: token id 70000 at position 123 is outside the model's vocabulary of 256" \
  --data "$work/corpus.txt" --data "$work/big.bin"
perl -e 'my @t = map { $_ % 200 } 0 .. 999; $t[999] = 256;
         print pack("l<256", 20240520, 1, 1000, (0) x 253), pack("S<*", @t)' >"$work/edge.bin"
refused "id 256 (v1)" "edge.bin: token id 256 at position 999 is outside the model's vocabulary of 256" \
  --data "$work/edge.bin"

# --data-format: text reads what auto refuses; shard refuses text.
"$exe" --data "$work/damaged.bin" --data-format text --steps 2 >"$work/out" 2>"$work/err"
expect_eq "--data-format text on the damaged shard: exit" 0 $?
expect_eq "--data-format text: steps run" 2 "$(grep -c '^step ' "$work/out")"
refused "--data-format shard on text" "corpus.txt: not a token shard (magic 538976288, expected 20240520" \
  --data "$work/corpus.txt" --data-format shard
"$exe" --data "$work/corpus.txt" --data-format csv --steps 1 >/dev/null 2>"$work/err"
expect_eq "--data-format csv: exit" 2 $?
grep -q -- "--data-format expects auto, shard or text, found 'csv'" "$work/err" && pass || fail "csv: $(head -1 "$work/err")"

# Text under a vocabulary smaller than a byte's: refused at the first byte it cannot hold.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/b100" --set vocab=100 "${small[@]}" \
  >"$work/compile.out" 2>&1 && pass || fail "compile (vocab 100): $(cat "$work/compile.out")"
exe="$work/b100/cpu0/fusion-cpu0"
printf 'abcd' >"$work/lower.txt"   # 'a' is 97, 'b' 98, 'c' 99, 'd' 100
refused "text beyond vocab 100" "lower.txt: token id 100 at position 3 is outside the model's vocabulary of 100" \
  --data "$work/lower.txt"

# Ids above 65,535 (a version 2 shard) reach the model whole: its first
# step's inputs (--dump-grads) hold them.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/b70k" --set vocab=70000 --set ctx=4 --set layers=1 \
  --set dim=8 --set heads=2 --set batch=1 --set seq=4 >"$work/compile.out" 2>&1 \
  && pass || fail "compile (vocab 70000): $(cat "$work/compile.out")"
perl -e 'print pack("l<256", 20240520, 2, 8, (0) x 253), pack("L<*", 69999, 65536, 65537, 69999, 65536, 65537, 69999, 65536)' \
  >"$work/wide.bin"
"$work/b70k/cpu0/fusion-cpu0" --data "$work/wide.bin" --steps 1 --dump-grads "$work/grads.st" >"$work/out" 2>&1 \
  && pass || fail "training on ids above 65535: $(tail -2 "$work/out")"
/usr/bin/python3 - "$work/grads.st" >"$work/ids" <<'PYEOF' || fail "reading the dumped inputs: $(cat "$work/ids")"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
for name in ("idx", "targets"):
    t = head[name]
    a, b = t["data_offsets"]
    print(name, *struct.unpack("<%di" % ((b - a) // 4), raw[8 + n + a:8 + n + b]))
PYEOF
ids=$(grep -oE '^idx( [0-9]+)+' "$work/ids")
case $ids in
  "idx 69999 65536 65537 69999" | "idx 65536 65537 69999 65536" | "idx 65537 69999 65536 65537") pass ;;
  *) fail "the first step's tokens: expected 4 consecutive ids of the shard (65536..69999), found '$ids'" ;;
esac
finish
