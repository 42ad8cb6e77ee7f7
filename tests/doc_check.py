#!/usr/bin/env python3
"""Checks that the documentation's references resolve and its examples are
the ones the tests run.

- Every relative link and image of README.md and docs/**/*.md (outside code
  blocks) names a file or folder that exists and, with `#anchor`, a heading
  of that file whose anchor (GitHub's: lower case, punctuation dropped,
  spaces to hyphens) is the anchor.
- Every `docs/<file>.md` or `docs/<file>.md#anchor` named in the sources
  (include/, lib/, tune/, tools/, tests/, python/, cl/, meson.build) exists,
  and no source cites a README section (`README, "Heading"` or
  `README "Heading"`) that is not a heading of README.md.
- README.md's C and Python blocks are exactly the two that the readme tests
  extract and run (the ```c block under "## From C", the ```python block
  under "## From Python"); each command of its ```sh blocks that runs a
  script of the tree names one that exists, with options the script knows,
  and its `pkg-config --cflags --libs oclfuse` answers for the build.
- Every ```c block of docs/ compiles (-fsyntax-only) against
  include/oclfuse.h, inside a function, after the declarations of the
  `<!-- c-decls: ... -->` comment that precedes it, so a call's arguments
  follow the header.

usage: doc_check.py SOURCE_ROOT [BUILD_ROOT]
BUILD_ROOT holds oclfuse_version.h for the compile check (skipped without).
Prints each failure and exits 1 if there is any.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Files linked before they are written, each checked once it exists
# (none now).
PENDING = set()

failures = []


def fail(where, what):
    failures.append(f"{where}: {what}")


def strip_code(text):
    """The text with fenced blocks and inline code blanked (lines kept)."""
    out, fence = [], False
    for line in text.split("\n"):
        if re.match(r"\s*```", line):
            fence = not fence
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchor(heading):
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    """The anchors of a Markdown file's headings (GitHub numbers repeats)."""
    seen, out = {}, set()
    fence = False
    for line in open(path, encoding="utf-8"):
        if re.match(r"\s*```", line):
            fence = not fence
        m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = anchor(m.group(1))
            n = seen.get(a, 0)
            out.add(a if n == 0 else f"{a}-{n}")
            seen[a] = n + 1
    return out


def headings(path):
    out = set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"#{1,6}\s+(.*?)\s*$", line)
        if m:
            out.add(m.group(1))
    return out


def check_target(root, where, base_dir, target):
    path, _, frag = target.partition("#")
    if not path:
        full = os.path.join(root, where)
    else:
        full = os.path.normpath(os.path.join(base_dir, path))
    rel = os.path.relpath(full, root)
    if not os.path.exists(full):
        if rel not in PENDING:
            fail(where, f"link to {target}: {rel} does not exist")
        return
    if frag:
        if not full.endswith(".md"):
            fail(where, f"link to {target}: an anchor in a file that is not Markdown")
        elif frag not in anchors(full):
            fail(where, f"link to {target}: {rel} has no heading #{frag}")


def check_markdown(root, md):
    rel = os.path.relpath(md, root)
    text = strip_code(open(md, encoding="utf-8").read())
    for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        check_target(root, rel, os.path.dirname(md), target)


def check_sources(root):
    readme_heads = headings(os.path.join(root, "README.md"))
    pats = ["include/**/*", "lib/**/*", "tune/**/*", "tools/**/*", "tests/**/*",
            "python/**/*", "cl/**/*", "meson.build", "meson_options.txt", "pyproject.toml",
            ".ci/*"]
    files = set()
    for p in pats:
        files.update(f for f in glob.glob(os.path.join(root, p), recursive=True)
                     if os.path.isfile(f))
    for f in sorted(files):
        rel = os.path.relpath(f, root)
        if rel == "tests/doc_check.py" or "/corpus" in rel:
            continue
        try:
            text = open(f, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        flat = re.sub(r"\s*\n\s*(?:\*|#|//)?\s*", " ", text)
        for m in re.finditer(r"\bdocs/[\w./-]*?\.md(?:#[\w-]+)?", flat):
            check_target(root, rel, root, m.group(0))
        for m in re.finditer(r"README(?:\.md)?,?\s+\"([^\"]{2,60})\"", flat):
            if m.group(1) not in readme_heads:
                fail(rel, f"cites README section \"{m.group(1)}\", which README.md has no heading for")


def check_readme_blocks(root):
    path = os.path.join(root, "README.md")
    lines = open(path, encoding="utf-8").read().split("\n")
    section, fence, blocks = None, None, []
    for i, line in enumerate(lines, 1):
        if fence is None:
            m = re.match(r"```(\w*)\s*$", line)
            if m:
                fence = (m.group(1), section, i, [])
            elif line.startswith("## "):
                section = line
        elif line.startswith("```"):
            blocks.append(fence)
            fence = None
        else:
            fence[3].append(line)
    runs = {"c": "## From C", "python": "## From Python"}
    for lang, heading in runs.items():
        mine = [b for b in blocks if b[0] == lang]
        if [b[1] for b in mine] != [heading]:
            fail("README.md", f"expected one ```{lang} block, under \"{heading}\" (the one the "
                 f"readme tests run); found {[(b[1], b[2]) for b in mine]}")
    for lang, sec, line_no, body in blocks:
        if lang in runs:
            continue
        if lang not in ("sh", ""):
            fail("README.md", f"line {line_no}: a ```{lang} block that no test runs")
            continue
        for cmd in body:
            words = cmd.split("#")[0].split()
            if not words or not words[0].startswith("tools/"):
                continue
            script = os.path.join(root, words[0])
            if not os.path.isfile(script):
                fail("README.md", f"line {line_no}: {words[0]} does not exist")
                continue
            src = open(script, encoding="utf-8").read()
            for w in words[1:]:
                if w.startswith("--") and w.split("=")[0] not in src:
                    fail("README.md", f"line {line_no}: {words[0]} knows no option {w}")


def check_pkg_config(root, build):
    """README links with `pkg-config ... oclfuse`: the build's own .pc file
    (the uninstalled twin of the one `meson install` writes) must answer."""
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    if "pkg-config --cflags --libs oclfuse" not in readme or not build:
        return
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(build, "meson-uninstalled"))
    try:
        r = subprocess.run(["pkg-config", "--cflags", "--libs", "oclfuse-uninstalled"],
                           capture_output=True, text=True, env=env)
    except OSError:
        print("doc_check: no pkg-config; the README's link line not checked")
        return
    if r.returncode != 0 or "-loclfuse" not in r.stdout:
        fail("README.md", f"pkg-config finds no oclfuse in the build: {r.stderr.strip()}")


def check_doc_c_blocks(root, build):
    version_h = os.path.join(build, "include", "oclfuse_version.h") if build else None
    if not version_h or not os.path.exists(version_h):
        print("doc_check: no oclfuse_version.h in the build folder; C blocks not compiled")
        return
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc):
        print(f"doc_check: no C compiler ({cc}); C blocks not compiled")
        return
    for md in sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)):
        rel = os.path.relpath(md, root)
        lines = open(md, encoding="utf-8").read().split("\n")
        decls = None
        i = 0
        while i < len(lines):
            m = re.match(r"\s*<!-- c-decls:(.*?)-->\s*$", lines[i])
            if m:
                decls = m.group(1).strip()
            fm = re.match(r"(\s*)```c\s*$", lines[i])
            if fm:
                indent = len(fm.group(1))
                start = i + 1
                j = start
                while not lines[j].strip().startswith("```"):
                    j += 1
                body = "\n".join(l[indent:] for l in lines[start:j])
                if decls is None:
                    fail(rel, f"line {i + 1}: a ```c block without a <!-- c-decls: ... --> "
                         "comment before it")
                else:
                    compile_block(cc, root, build, rel, i + 1, decls, body)
                decls = None
                i = j
            i += 1


def compile_block(cc, root, build, rel, line_no, decls, body):
    src = ("#include <oclfuse.h>\n#include <stddef.h>\n"
           "void doc_block(void);\nvoid doc_block(void)\n{\n"
           f"{decls}\n#line {line_no + 1} \"{rel}\"\n{body}\n}}\n")
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(src)
        name = f.name
    try:
        r = subprocess.run([cc, "-std=c11", "-fsyntax-only", "-Werror=implicit-function-declaration",
                            "-Werror=incompatible-pointer-types", "-Werror=int-conversion",
                            "-I", os.path.join(root, "include"), "-I", build, "-I", os.path.join(build, "include"), name],
                           capture_output=True, text=True)
    finally:
        os.unlink(name)
    if r.returncode != 0:
        fail(rel, f"line {line_no}: the ```c block does not compile:\n{r.stderr.strip()}")


def main():
    root = os.path.abspath(sys.argv[1])
    build = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
    mds = [os.path.join(root, "README.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    for md in mds:
        check_markdown(root, md)
    check_sources(root)
    check_readme_blocks(root)
    check_pkg_config(root, build)
    check_doc_c_blocks(root, build)
    for f in failures:
        print(f)
    print(f"doc_check: {len(mds)} Markdown files, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
