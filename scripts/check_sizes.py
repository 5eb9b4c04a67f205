#!/usr/bin/env python3
"""Holds src/kiri to the size rules of the developers' guide: no file over 600 lines, no
function over 80. A function is a definition at namespace scope (clang-format puts its
closing brace in column 0), counted from its first line to its closing brace. Tables that
are data, not logic, are listed below with the reason; anything else over a limit is named
with its file, line and length, and the exit code is 1.

    python3 scripts/check_sizes.py [--root DIR]
"""
import argparse
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
# (file, function name): why it may be longer.
EXEMPT_FUNCTIONS = {
    ("config_schema.cpp", "make_fields"): "the config field table: one entry per key",
    ("config_layout_fields.cpp", "add_parallel_fields"): "the config field table's parallel.* keys",
    ("verbs.cpp", "plan_options"): "kiri plan's option table: one entry per option",
}
NOT_A_FUNCTION = re.compile(r"^(namespace|struct|class|enum|union|extern|template\s*<[^>]*>\s*(struct|class))\b")
NAME = re.compile(r"([A-Za-z_~][A-Za-z_0-9:<>~]*)\s*\(")


def functions(lines):
    """(first line, name, length) of each column-0 definition."""
    out, start, name = [], None, None
    for i, line in enumerate(lines):
        if start is None:
            if not line or line[0] in " \t#/}" or NOT_A_FUNCTION.match(line):
                continue
            code = lambda k: lines[k].split("//")[0].rstrip()
            if code(i).endswith(";"):
                continue  # a declaration or a namespace-scope variable
            m = NAME.search(line)
            if not m or "=" in line.split("(")[0]:
                continue
            # The signature may wrap onto indented lines; the body opens on one ending "{".
            j = i
            while not code(j).endswith("{") and not code(j).endswith(";"):
                j += 1
                if j == len(lines) or (lines[j][:1] not in (" ", "\t") and lines[j][:1] != "{"):
                    break
            if j < len(lines) and code(j).endswith("{"):
                start, name = i, m.group(1).split("::")[-1]
        elif line.startswith("}"):
            out.append((start + 1, name, i - start + 1))
            start = None
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent)
    root = pathlib.Path(parser.parse_args().root)
    problems = []
    for path in sorted((root / "src" / "kiri").rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        rel = path.relative_to(root)
        if len(lines) > MAX_FILE_LINES:
            problems.append(f"{rel}: {len(lines)} lines, over {MAX_FILE_LINES}: split it")
        for first, name, length in functions(lines):
            if length > MAX_FUNCTION_LINES and (path.name, name) not in EXEMPT_FUNCTIONS:
                problems.append(f"{rel}:{first}: {name} is {length} lines, over "
                                f"{MAX_FUNCTION_LINES}: split it")
    for p in problems:
        print(p)
    if problems:
        print(f"check_sizes: {len(problems)} over the limits", file=sys.stderr)
        return 1
    print(f"check_sizes: every file within {MAX_FILE_LINES} lines, every function within "
          f"{MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
