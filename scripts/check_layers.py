#!/usr/bin/env python3
"""Checks every `#include "kiri/..."` in src/kiri against the layer table of docs/design.md.

The table's first column names a layer (its folder under src/kiri; `kernels/cpu` is the
`kernels` layer), its last column what it links. A file of layer L may include its own layer
and the layers L links, directly or through them; anything else (an include that runs back
up, or sideways to a layer L does not link) is named with its file and line, and the exit
code is 1. A folder of src/kiri that the table lacks fails too, so the table stays whole.
A backend folder is private to its layer: no file outside src/kiri/kernels includes
kiri/kernels/cpu/ (the others call the front, kernels/ops.h, which dispatches on the device;
docs/design.md), so a new backend is a folder beside cpu/ and no caller changes.

    python3 scripts/check_layers.py [--root DIR]   # DIR: the checkout (default: this one)
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"kiri/([^/"]+)/')
# Folders that only their own layer may include: {include prefix: the layer's folder}.
PRIVATE = {"kernels/cpu/": "kernels"}
PRIVATE_INCLUDE = re.compile(r'^\s*#\s*include\s+"kiri/([^"]+)"')


def read_table(design):
    """{layer: set of layers it links} from the first table under '## Layers'."""
    lines = design.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index("## Layers")
    except ValueError:
        sys.exit(f"check_layers: {design} has no '## Layers' section")
    rows, seen_table = [], False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            seen_table = True
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif seen_table:
            break
    links = {}
    for cells in rows[2:]:  # the header and its separator first
        name = re.match(r"`([^`]+)`", cells[0])
        if not name:
            sys.exit(f"check_layers: {design}: a layer row without a `name`: {cells[0]}")
        # What it links, without the asides in parentheses (prose may say "tensor-parallel").
        links[name.group(1).split("/")[0]] = re.sub(r"\([^)]*\)", "", cells[-1])
    words = {layer: set(re.findall(r"[A-Za-z_-]+", text)) & set(links) for layer, text in links.items()}
    return words


def closure(links):
    """Every layer each layer may include: itself, and what it links, transitively."""
    out = {}
    for layer in links:
        seen, todo = {layer}, [layer]
        while todo:
            for dep in links[todo.pop()]:
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        out[layer] = seen
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent)
    root = pathlib.Path(parser.parse_args().root)
    design, src = root / "docs" / "design.md", root / "src" / "kiri"
    allowed = closure(read_table(design))
    problems = []
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        if folder.name not in allowed:
            problems.append(f"src/kiri/{folder.name}/ is a folder that {design.name}'s layer "
                            f"table does not name: add its row (what it holds, what it links)")
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp") or path.parent == src:
            continue  # main.cpp sits above every layer
        layer = path.relative_to(src).parts[0]
        if layer not in allowed:
            continue  # named above
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) not in allowed[layer]:
                may = ", ".join(sorted(allowed[layer] - {layer})) or "no other layer"
                problems.append(f"{path.relative_to(root)}:{number} includes kiri/{m.group(1)}/: "
                                f"layer {layer} may include only {may} (docs/design.md)")
            p = PRIVATE_INCLUDE.match(line)
            for prefix, owner in PRIVATE.items():
                if p and p.group(1).startswith(prefix) and layer != owner:
                    problems.append(f"{path.relative_to(root)}:{number} includes kiri/{prefix}: "
                                    f"only {owner} may; call the front kiri/{owner}/ops.h "
                                    f"(docs/design.md)")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layer table", file=sys.stderr)
        return 1
    print(f"check_layers: {len(allowed)} layers, every include follows docs/design.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
