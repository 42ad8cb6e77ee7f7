#!/usr/bin/env python3
"""Writes one fenced code block of a Markdown file into a file of its own,
so that a test compiles or runs the text the reader sees.

usage: readme_block.py MARKDOWN HEADING LANG OUT

The block is the first ```LANG block after the line `HEADING` (a whole
heading line, e.g. "## From C"). Exits 1, naming what is missing, when the
heading or the block is not there, so the build fails rather than testing
an example that is gone.
"""
import re
import sys


def block(text, heading, lang):
    lines = text.split("\n")
    try:
        start = lines.index(heading)
    except ValueError:
        sys.exit(f"no heading line {heading!r}")
    rest = "\n".join(lines[start + 1:])
    m = re.search(r"^```" + re.escape(lang) + r"\n(.*?)^```", rest, re.S | re.M)
    if not m:
        sys.exit(f"no ```{lang} block after {heading!r}")
    return m.group(1)


def main():
    path, heading, lang, out = sys.argv[1:5]
    code = block(open(path).read(), heading, lang)
    with open(out, "w") as f:
        f.write(f"/* Generated from {path.split('/')[-1]}, the ```{lang} block after "
                f"\"{heading}\". */\n" if lang == "c" else "")
        f.write(code)


if __name__ == "__main__":
    main()
