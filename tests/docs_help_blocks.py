"""docs_help_blocks.py: docs/cli.md quotes every command's --help; this keeps
the quotes true.  Each ```text block of docs/cli.md that starts with
"usage: fusionc SUB" (or "usage: fusionc COMMAND", the main help, or the
list `fusionc passes` prints, or a device program's "usage: .../fusion-...")
is compared with what the program prints now.

  docs_help_blocks.py check FUSIONC DEVICE-PROGRAM   exit 1 naming each stale block
  docs_help_blocks.py write FUSIONC DEVICE-PROGRAM   rewrite the stale blocks
"""
import re
import subprocess
import sys

DOC = "docs/cli.md"


def help_text(fusionc, device, first_line):
    if first_line.startswith("usage: fusionc COMMAND"):
        args = [fusionc, "--help"]
    elif first_line.startswith("usage: fusionc "):
        args = [fusionc, first_line.split()[2], "--help"]
    elif first_line.startswith("usage: ") and "fusion-" in first_line.split()[1]:
        args = [device, "--help"]
    elif first_line.startswith("frontend "):
        args = [fusionc, "passes"]
    else:
        return None
    run = subprocess.run(args, capture_output=True, text=True)
    out = (run.stdout or "") + (run.stderr or "")   # (a usage on either is the usage)
    if args[0] == device:   # the program's own path: the docs show a placeholder
        out = out.replace(device, "/tmp/OUT/<device>/fusion-<device>", 1)
    return out.rstrip("\n")


def main():
    mode, fusionc, device = sys.argv[1:4]
    text = open(DOC, encoding="utf-8").read()
    parts = re.split(r"(```text\n)(.*?)(\n```)", text, flags=re.S)
    stale = []
    for i in range(2, len(parts), 4):
        body = parts[i]
        now = help_text(fusionc, device, body.split("\n", 1)[0])
        if now is not None and now != body.rstrip("\n"):
            stale.append(body.split("\n", 1)[0][:70])
            parts[i] = now
    if mode == "write":
        open(DOC, "w", encoding="utf-8").write("".join(parts))
    for s in stale:
        print(f"{DOC}: the quoted help of '{s}' differs from what the program prints" +
              (" (rewritten)" if mode == "write" else ""))
    return 1 if stale and mode == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
