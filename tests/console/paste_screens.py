"""Paste the screens the console's tests captured into docs/console.md.

    PYTHONPATH=$PWD python -m pytest tests/console      # writes var/console-screens/NAME.txt
    python3 tests/console/paste_screens.py              # replaces each block after <!-- screen: NAME -->

The test machine's temporary paths are shortened to /srv/ (the node's
overview runs its agent under a short directory of its own, so that no
line there was wrapped for a path that is now shorter).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCREENS = ROOT / "var" / "console-screens"
DOC = ROOT / "docs" / "console.md"
MARK = re.compile(r"(<!-- screen: ([\w-]+) -->\n)```\n.*?\n```", re.S)


def tidy(text: str) -> str:
    text = re.sub(r"/tmp/pytest-of-\w+/pytest-\d+/[^/\s]+/|/tmp/llmgw-\w+/", "/srv/", text)
    lines = text.split("\n")
    for i, line in enumerate(lines):  # a box's right edge stays where the terminal drew it
        if "/srv/" in line and line.endswith("│") and i:
            body = line[:-1].rstrip()
            lines[i] = body + " " * max(1, len(lines[i - 1]) - 1 - len(body)) + "│"
    text = "\n".join(lines)
    return re.sub(r"\n(\s*\n){2,}", "\n\n", text).rstrip()


def main() -> int:
    doc = DOC.read_text()
    missing = [name for _, name in MARK.findall(doc) if not (SCREENS / f"{name}.txt").exists()]
    if missing:
        print(f"no capture for {', '.join(missing)} in {SCREENS}: run the tests in tests/console first",
              file=sys.stderr)
        return 1
    DOC.write_text(MARK.sub(lambda m: f"{m.group(1)}```\n{tidy((SCREENS / f'{m.group(2)}.txt').read_text())}\n```",
                            doc))
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
