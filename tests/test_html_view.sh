# `fusionc dump --format html`: one self-contained page that loads nothing
# from a network, opens in headless Chromium without a script error, shows
# GPT-2's repeated blocks collapsed with their counts, draws a screenshot
# that is not blank, and draws GPT-2 XL after every pass in under 3 s (its
# own measure, load to drawn); placed, its legend names the devices;
# #select= and #search= open it on an op (its block expanded) or a search.
. "$(dirname "$0")/lib.sh"
command -v chromium >/dev/null || { echo "FAIL: chromium is not installed (scripts/install-deps.sh)" >&2; exit 1; }

# chromium ARGS... URL: headless, its own profile (tests run in parallel), 60 s at most.
browse() {
  timeout 60 chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/profile" \
    --hide-scrollbars "$@" 2>>"$work/chromium.err"
}
# status FILE.dom: the page's #status element, as it reported itself.
status() { grep -o '<div id="status"[^>]*>[^<]*' "$1"; }

# 1. GPT-2 small after every pass: one file, nothing it would load.
"$FUSIONC" dump models/gpt2.xml --format html -o "$work/gpt2.html" 2>"$work/err" && pass || fail "dump --format html: $(cat "$work/err")"
page="$work/gpt2.html"
loads=$(grep -Eoi '(src|href)[[:space:]]*=[[:space:]]*["'\'']?[[:space:]]*(https?:)?//[^"'\'' >]*|<script[^>]*[[:space:]]src[[:space:]]*=|<link[[:space:]][^>]*>|@import|url\([^)]*\)|fetch[[:space:]]*\(|XMLHttpRequest|\bimport[[:space:]]*\(|new[[:space:]]+(WebSocket|EventSource|Worker)' "$page" | head -5)
[ -z "$loads" ] && pass || fail "the page would load something: $loads"
urls=$(grep -Eoi 'https?://[^"'\'' <>)]*' "$page" | sort -u | head -5)
[ -z "$urls" ] && pass || fail "the page names a network address: $urls"
grep -q '<script type="application/json" id="graph">' "$page" && pass || fail "no graph JSON in the page"

# 2. Opened: ready, no script error, the blocks collapsed with their counts.
browse --dump-dom "file://$page" >"$work/gpt2.dom"
st=$(status "$work/gpt2.dom")
echo "GPT-2 small: $st" >&2
case "$st" in *'data-ready="1"'*) pass ;; *) fail "GPT-2 small page not ready: '$st' $(tail -3 "$work/chromium.err")" ;; esac
case "$st" in *data-error*) fail "script error: $st" ;; *) pass ;; esac
grep -q '>h\.0-11 forward</text>' "$work/gpt2.dom" && pass || fail "no collapsed 'h.0-11 forward' box"
grep -q '>h\.0-11 backward</text>' "$work/gpt2.dom" && pass || fail "no collapsed 'h.0-11 backward' box"
grep -Eq '>12 blocks, [0-9]+ ops</text>' "$work/gpt2.dom" && pass || fail "no '12 blocks, N ops' count"
grep -q 'class="legend-item legend-device"' "$work/gpt2.dom" && pass || fail "no device legend"

# 3. The screenshot: a PNG with more than a few colours (a blank or an
# error page has one or two).
browse --screenshot="$work/gpt2.png" --window-size=1400,900 "file://$page" >/dev/null
colours=$(/usr/bin/python3 - "$work/gpt2.png" <<'EOF'
# Distinct colours of an 8-bit RGB(A) PNG, by the standard library alone.
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
at, idat, width = 8, b'', 0
while at < len(data):
    n, kind = struct.unpack('>I4s', data[at:at + 8])
    body = data[at + 8:at + 8 + n]
    if kind == b'IHDR':
        width, height, depth, ctype = struct.unpack('>IIBB', body[:10])
        assert depth == 8 and ctype in (2, 6), 'only 8-bit RGB or RGBA'
        bpp = 3 if ctype == 2 else 4
    elif kind == b'IDAT':
        idat += body
    at += 12 + n
raw, stride = zlib.decompress(idat), width * bpp
prev, seen = bytearray(stride), set()
for y in range(height):
    f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = row[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: row[i] = (row[i] + a) & 255
        elif f == 2: row[i] = (row[i] + b) & 255
        elif f == 3: row[i] = (row[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    if y % 3 == 0:   # every third row is plenty to count colours
        seen.update(bytes(row[i:i + 3]) for i in range(0, stride, bpp * 2))
    prev = row
print(len(seen))
EOF
)
echo "GPT-2 small screenshot: $(stat -c %s "$work/gpt2.png" 2>/dev/null) bytes, ${colours:-?} colours" >&2
[ "${colours:-0}" -gt 8 ] 2>/dev/null && pass || fail "screenshot $work/gpt2.png blank or unreadable: '${colours}' colours"

# 4. GPT-2 XL after every pass: drawn, by the page's own clock, in under 3 s.
"$FUSIONC" dump models/gpt2.xml --set layers=48 --set dim=1600 --set heads=25 --format html -o "$work/xl.html" 2>"$work/err" \
  && pass || fail "dump GPT-2 XL: $(cat "$work/err")"
start=$(date +%s.%N)
browse --dump-dom "file://$work/xl.html" >"$work/xl.dom"
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
st=$(status "$work/xl.dom")
ms=$(echo "$st" | sed -n 's/.*data-load-ms="\([0-9]*\)".*/\1/p')
echo "GPT-2 XL after every pass: $(stat -c %s "$work/xl.html") bytes; the page: $st; chromium start to exit: $wall s" >&2
case "$st" in *'data-ready="1"'*) pass ;; *) fail "GPT-2 XL page not ready: '$st'" ;; esac
grep -q '>h\.0-47 forward</text>' "$work/xl.dom" && pass || fail "no collapsed 'h.0-47 forward' box in GPT-2 XL"
[ -n "$ms" ] && [ "$ms" -lt 3000 ] && pass || fail "GPT-2 XL drawn in '${ms}' ms from load (limit 3000)"

# 5. Placed on a cluster: more than one device in the legend, borders by stage.
"$FUSIONC" dump models/gpt2.xml clusters/local-4.xml --set layers=4 --format html -o "$work/placed.html" 2>"$work/err" \
  && pass || fail "dump placed: $(cat "$work/err")"
browse --dump-dom "file://$work/placed.html#select=ln_f:s1" >"$work/placed.dom"
devices=$(grep -o 'class="legend-item legend-device"' "$work/placed.dom" | wc -l)
[ "$devices" -gt 1 ] && pass || fail "placed: $devices devices in the legend, expected more than 1"
grep -q 'class="legend-item legend-stage-border"' "$work/placed.dom" && pass || fail "placed: no stage legend"
details=$(sed -n 's/.*<section id="details">\(.*\)<\/section>.*/\1/p' "$work/placed.dom" | sed 's/<[^>]*>/ /g' | tr -s ' ')
case "$details" in *"op recv"*"stage 1"*"made by comm"*) pass ;; *) fail "placed, #select=ln_f:s1: $details" ;; esac

# 6. #select= expands the op's block and shows it in the side panel.
browse --dump-dom "file://$page#select=h.3.qkv" >"$work/sel.dom"
st=$(status "$work/sel.dom")
case "$st" in *'data-ready="1"'*'data-collapsed="6"'*) pass ;; *) fail "#select=h.3.qkv did not expand one block: '$st'" ;; esac
details=$(sed -n 's/.*<section id="details">\(.*\)<\/section>.*/\1/p' "$work/sel.dom" | sed 's/<[^>]*>/ /g' | tr -s ' ')
for want in "h.3.qkv op linear" "f32[4,1024,2304]" "FLOPs 14.50 GFLOP" "bytes 54.76 MiB" "device device 0" "stage 0" \
            "phase forward" "gpt2.xml:76" "made by frontend"; do
  case "$details" in *"$want"*) pass ;; *) fail "#select=h.3.qkv: no '$want' in the side panel: $details" ;; esac
done
browse --dump-dom "file://$page#select=logits.backward" >"$work/sel.dom"
details=$(sed -n 's/.*<section id="details">\(.*\)<\/section>.*/\1/p' "$work/sel.dom" | sed 's/<[^>]*>/ /g' | tr -s ' ')
case "$details" in *"phase backward"*"made by autodiff"*) pass ;; *) fail "#select=logits.backward: $details" ;; esac

# 7. #search= outlines the block that holds the matches, and says how many.
browse --dump-dom "file://$page#search=qkv" >"$work/search.dom"
grep -Eq '<span id="found">[0-9]+ ops \([0-9]+ in collapsed blocks' "$work/search.dom" && pass \
  || fail "#search=qkv: $(grep -o '<span id="found">[^<]*' "$work/search.dom")"
grep -q 'class="box group hit"' "$work/search.dom" && pass || fail "#search=qkv: no collapsed block outlined"

# 8. --expand starts with every block expanded; a bad format is a usage error.
"$FUSIONC" dump models/gpt2.xml --set layers=2 --format html --expand -o "$work/all.html" && \
  browse --dump-dom "file://$work/all.html" >"$work/all.dom"
case "$(status "$work/all.dom")" in *'data-ready="1"'*'data-collapsed="0"'*) pass ;; *) fail "--expand: $(status "$work/all.dom")" ;; esac
"$FUSIONC" dump models/gpt2.xml --format svg -o "$work/x.svg" 2>"$work/err"
expect_eq "--format svg: exit" 2 $?
grep -q "format expects text, dot or html, found 'svg'" "$work/err" && pass || fail "--format svg: $(head -1 "$work/err")"
[ ! -e "$work/x.svg" ] && pass || fail "a bad --format left its output"
finish
