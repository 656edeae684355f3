# The documentation's commands work as written: every command line in a
# code block of README.md and docs/*.md that runs fusionc (fusionc,
# build/fusionc, "$FUSIONC"), a device program (.../fusion-<device>) or
# launch-local.sh names a subcommand that exists (`fusionc SUB --help`
# exits 0) and only long options that its --help lists (a device
# program's: a compiled bundle's --help; launch and broker also pass the
# device programs' options on); the cheap, self-contained ones (check,
# stats, dump, passes, plan, simulate, compile on shipped files) run, in
# document order, in a scratch folder, and exit 0.  Every relative link
# and image in those files points to a file that exists, and a link's
# #anchor to a heading of that file.  Code blocks tagged text, xml or json
# hold output, not commands, and are skipped.  docs/cli.md's quotes of each
# --help are what the programs print now (tests/docs_help_blocks.py).
. "$(dirname "$0")/lib.sh"
py=/usr/bin/python3

# One bundle, for the device programs' --help.
"$FUSIONC" compile models/mlp.xml clusters/local-1.xml -o "$work/mlp" >"$work/c.out" 2>&1 \
  && pass || fail "compile of the MLP for a device program's --help: $(cat "$work/c.out")"
"$work/mlp/cpu0/fusion-cpu0" --help >"$work/help.device" 2>&1
expect_eq "a device program's --help: exit" 0 $?

# help_of SUB: the --help text of fusionc SUB in $work/help.SUB (cached); 0 when it exists.
help_of() {
  local sub=$1
  [ -f "$work/help.$sub" ] && return "$(cat "$work/rc.$sub")"
  "$FUSIONC" "$sub" --help >"$work/help.$sub" 2>&1
  local rc=$?
  echo "$rc" >"$work/rc.$sub"
  return "$rc"
}

# The extraction: one record a command, TAB-separated: file, line, kind
# (fusionc, device, launch-local), subcommand, whether it may run (run or
# check), the command as one line.  Then one record a link: link, file,
# line, target.
"$py" - "$work/commands" "$work/links" README.md docs/*.md <<'PYEOF'
import os, re, sys
cmd_out, link_out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
CHEAP = {"check", "stats", "dump", "passes", "plan", "simulate", "compile"}
fusionc = re.compile(r'^(?:build/fusionc|fusionc|"\$FUSIONC"|\$FUSIONC)(?:\s|$)')
device = re.compile(r'^(?:\S*/fusion-\S+|fusion-<device>)(?:\s|$)')
local = re.compile(r'^\S*launch-local\.sh(?:\s|$)')
cmds, links = [], []
for path in files:
    lines = open(path, encoding="utf-8").read().split("\n")
    fence, joined, start = None, "", 0
    for n, line in enumerate(lines, 1):
        m = re.match(r"^\s*(```+|~~~+)\s*(\S*)", line)
        if m and fence is None:
            fence = (m.group(1), m.group(2).lower()); continue
        if m and fence is not None and line.strip().startswith(fence[0]):
            fence = None; continue
        if fence is None:
            for lm in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
                links.append((path, n, lm.group(1)))
            continue
        if fence[1] in ("text", "xml", "json", "output"):
            continue
        # continuation lines join into one command
        if joined:
            joined += " " + line.strip()
        else:
            joined, start = line.strip(), n
        if joined.endswith("\\"):
            joined = joined[:-1].rstrip(); continue
        text, joined = joined, ""
        text = re.sub(r"^\$\s+", "", text)
        # a comment is not part of the command; nor is what follows a pipe or ;
        code = re.split(r"\s#", " " + text, 1)[0].strip()
        for seg in re.split(r"\s*(?:\|\||&&|\||;)\s*", code):
            seg = seg.strip()
            if fusionc.match(seg):
                words = seg.split()
                sub = words[1] if len(words) > 1 else ""
                kind = "fusionc"
            elif local.match(seg):
                kind, sub = "launch-local", ""
            elif device.match(seg) and not seg.startswith("fusionc"):
                kind, sub = "device", ""
            else:
                continue
            # runnable: a cheap subcommand, no placeholders or brackets, every path argument there
            # (or made by an earlier command: checked at run time)
            runnable = kind == "fusionc" and sub in CHEAP and not re.search(r"[\[\]<>]|\.\.\.|\b[A-Z]{3,}\b", seg)
            cmds.append((path, start, kind, sub, "run" if runnable else "check", seg))
with open(cmd_out, "w") as f:
    for c in cmds: f.write("\t".join(map(str, c)) + "\n")
with open(link_out, "w") as f:
    for l in links: f.write("\t".join(map(str, l)) + "\n")
PYEOF
[ -s "$work/commands" ] && pass || fail "no commands found in README.md and docs/*.md"

# The scratch folder the runnable commands run in: the shipped files, and
# fusionc as build/fusionc and on PATH.
mkdir -p "$work/run/build" "$work/bin"
for d in models clusters tests; do ln -s "$FUSION_SOURCE_DIR/$d" "$work/run/$d"; done
ln -s "$FUSIONC" "$work/run/build/fusionc"
ln -s "$FUSIONC" "$work/bin/fusionc"
ran=0
while IFS=$'\t' read -r file line kind sub mode cmd; do
  where="$file:$line: $cmd"
  case $kind in
    fusionc)
      if ! help_of "$sub"; then fail "$where: 'fusionc $sub --help' exits $(cat "$work/rc.$sub"): $(head -2 "$work/help.$sub")"; continue; fi
      helps=("$work/help.$sub")
      # launch and broker pass the device programs' options on; launch --elastic the broker's
      case $sub in
        launch|broker) helps+=("$work/help.device"); help_of broker; helps+=("$work/help.broker") ;;
      esac ;;
    device) helps=("$work/help.device") ;;
    launch-local)
      helps=("$work/help.device")
      case " $cmd " in *" --elastic "*) help_of broker; helps+=("$work/help.broker") ;; esac ;;
  esac
  ok=1
  for opt in $(grep -oE '(^|[[:space:][])--[A-Za-z][A-Za-z0-9-]*' <<<"$cmd" | sed 's/^[[:space:][]*//' | sort -u); do
    if ! grep -qE -- "(^|[^A-Za-z0-9-])$opt([^A-Za-z0-9-]|\$)" "${helps[@]}"; then
      fail "$where: option $opt is not in the --help of ${sub:-$kind}"; ok=0
    fi
  done
  [ "$ok" -eq 1 ] && pass
  if [ "$mode" = run ]; then
    # the paths it reads must exist (an earlier command may have made them)
    (cd "$work/run" && PATH="$work/bin:$PATH" FUSIONC="$FUSIONC" timeout 60 bash -c "$cmd" >"$work/out" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ]; then pass; ran=$((ran + 1)); else fail "$where: exit $rc: $(tail -3 "$work/out")"; fi
  fi
done <"$work/commands"
echo "$(wc -l <"$work/commands") commands checked, $ran run" >&2
[ "$ran" -ge 10 ] && pass || fail "only $ran commands ran; expected at least 10"

# Relative links: the file exists, and a #anchor names a heading in it.
# docs/images/ir-viewer.png is made on another branch (the HTML IR viewer):
# the one path allowed to be missing.
exempt="docs/images/ir-viewer.png"
"$py" - "$work/links" "$exempt" >"$work/link-problems" <<'PYEOF'
import os, re, sys
links, exempt = sys.argv[1], sys.argv[2]
def slug(h):
    h = re.sub(r"[`*_]", "", h.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")
anchors = {}
def anchors_of(p):
    if p not in anchors:
        s, fence = set(), False
        for line in open(p, encoding="utf-8"):
            if line.lstrip().startswith("```"): fence = not fence; continue
            m = re.match(r"^#{1,6}\s+(.*)", line)
            if m and not fence: s.add(slug(m.group(1)))
        anchors[p] = s
    return anchors[p]
n = 0
for rec in open(links, encoding="utf-8"):
    path, line, target = rec.rstrip("\n").split("\t")
    if re.match(r"^[a-z]+:", target): continue  # http:, https:, mailto:
    n += 1
    file, _, anchor = target.partition("#")
    dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
    if dest == exempt: continue
    if not os.path.exists(dest):
        print(f"{path}:{line}: the link {target} points to {dest}, which does not exist"); continue
    if anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
        print(f"{path}:{line}: the link {target}: {dest} has no heading #{anchor}")
print(f"OK {n}")
PYEOF
while read -r problem; do
  case $problem in "OK "*) nlinks=${problem#OK }; pass ;; *) fail "$problem" ;; esac
done <"$work/link-problems"
echo "${nlinks:-0} relative links checked" >&2
[ "${nlinks:-0}" -ge 20 ] && pass || fail "only ${nlinks:-0} relative links found; expected at least 20"
grep -q "docs/images/ir-viewer.png" README.md && pass || fail "README.md should show docs/images/ir-viewer.png"
grep -q "docs/images/report-loss.png" README.md && pass || fail "README.md should show docs/images/report-loss.png"
expect_eq "README.md at most 220 lines" 1 "$([ "$(wc -l <README.md)" -le 220 ] && echo 1 || echo 0)"
# docs/cli.md's quoted --help texts are what the programs print now
# (tests/docs_help_blocks.py write ... rewrites them).
"$py" tests/docs_help_blocks.py check "$FUSIONC" "$work/mlp/cpu0/fusion-cpu0" >"$work/help-blocks" 2>&1 && pass \
  || fail "$(cat "$work/help-blocks"); run: /usr/bin/python3 tests/docs_help_blocks.py write build/fusionc OUT/cpu0/fusion-cpu0"
finish
