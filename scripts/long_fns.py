#!/usr/bin/env python3
"""Lists Rust functions whose bodies run over a line limit.

Usage: scripts/long_fns.py [--over N] [PATH ...]

Each PATH is a .rs file or a folder searched for .rs files (folders named `target` or
starting with a dot are skipped); the default is the current folder. Prints one line per
function longer than N lines (default 150), counted from the `fn` line to its closing brace:

    path/to/file.rs:LINE name LENGTH

Bodies are found by brace matching after blanking comments, strings and character
literals, so braces inside them do not count. A function nested in another is reported on
its own as well as counted in its parent.
"""

import argparse
import os
import re
import sys

FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
RAW_STR_RE = re.compile(r'b?r(#*)"')


def blank(src):
    """`src` with comments, strings and char literals replaced by spaces (newlines kept),
    so that offsets and line numbers stay the same."""
    out = list(src)
    i, n = 0, len(src)

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in "br" and (m := RAW_STR_RE.match(src, i)):
            # Raw string: only the matching quote-and-hashes ends it.
            if i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_"):
                i += 1
                continue
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            wipe(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a), which is left alone.
            if src.startswith("\\", i + 1):
                j = src.find("'", i + 3)
                j = n if j < 0 else j
                wipe(i, j + 1)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                wipe(i, i + 3)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def functions(src):
    """(line, name, length in lines) of every function with a body in `src`."""
    text = blank(src)
    line_starts = [0]
    for k, ch in enumerate(text):
        if ch == "\n":
            line_starts.append(k + 1)

    def line_of(off):
        lo, hi = 0, len(line_starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if line_starts[mid] <= off:
                lo = mid
            else:
                hi = mid
        return lo + 1

    found = []
    for m in FN_RE.finditer(text):
        # The body opens at the first `{` outside parentheses and brackets; a `;` there
        # first means a declaration without a body (trait method, extern fn).
        depth, j, open_at = 0, m.end(), None
        while j < len(text):
            ch = text[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch == ";":
                break
            elif depth == 0 and ch == "{":
                open_at = j
                break
            j += 1
        if open_at is None:
            continue
        braces, j = 0, open_at
        while j < len(text):
            if text[j] == "{":
                braces += 1
            elif text[j] == "}":
                braces -= 1
                if braces == 0:
                    break
            j += 1
        first = line_of(m.start())
        found.append((first, m.group(1), line_of(j) - first + 1))
    return found


def rust_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d != "target" and not d.startswith("."))
            for f in sorted(files):
                if f.endswith(".rs"):
                    yield os.path.join(root, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--over", type=int, default=150, help="report functions longer than this many lines"
    )
    ap.add_argument("paths", nargs="*", default=["."])
    args = ap.parse_args()
    for path in rust_files(args.paths):
        try:
            with open(path, encoding="utf-8") as fh:
                src = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            continue
        for line, name, length in functions(src):
            if length > args.over:
                print(f"{path}:{line} {name} {length}")


if __name__ == "__main__":
    main()
