#!/usr/bin/env python3
"""Finds import circles between the modules of a Rust crate, so that a layered crate stays layered.

    python3 scripts/module_cycles.py lockkit/src      exit 1 and the circles, if there are any

At every level of the module tree, the nodes are the modules declared side by side (`a.rs`,
`b/mod.rs` or `b.rs` with `b/`), and there is an edge a -> b when anything inside a names
anything inside b: `use crate::b::..`, `crate::b::f()` in code, `super::b` from a's children, or
`use` groups such as `crate::{b::X, c}`. A parent naming its own children is not an edge (that is
what a module does with what it declares); siblings naming each other are. The crate root
(`lib.rs`) only declares and re-exports, so it is not a node. A circle is a strongly connected
component of more than one module, reported with the files whose references make it.

Comments and string literals are skipped, so a doc comment that mentions `crate::x` makes no
edge. The check is textual (no macro expansion, no type inference): it sees every path written out
in full, which is how this project writes cross-module references.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

# `crate::a::b`, `super::a`, `self::a` and `use` groups `{a::b, c}` after them.
PATH_START = re.compile(r"\b(crate|super|self)\s*::")


def strip_comments_and_strings(text: str) -> str:
    """The source with comments, string and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append("\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.[^']*|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_paths(code: str, at: int) -> list[list[str]]:
    """Every path that the reference starting at `at` (just after `crate::`) names, as segments;
    a `use` group yields one path per member."""
    paths: list[list[str]] = []

    def walk(pos: int, prefix: list[str]) -> int:
        segs = list(prefix)
        while True:
            m = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)").match(code, pos)
            if m:
                segs.append(m.group(1))
                pos = m.end()
                sep = re.compile(r"\s*::").match(code, pos)
                if sep:
                    pos = sep.end()
                    continue
                paths.append(segs)
                return pos
            g = re.compile(r"\s*\{").match(code, pos)
            if g:
                pos = g.end()
                while True:
                    pos = walk(pos, segs)
                    m2 = re.compile(r"\s*(,|\})").match(code, pos)
                    if not m2:
                        return pos
                    pos = m2.end()
                    if m2.group(1) == "}":
                        return pos
                    if re.compile(r"\s*\}").match(code, pos):
                        return re.compile(r"\s*\}").match(code, pos).end()
            if segs:
                paths.append(segs)
            return pos

    walk(at, [])
    return paths


class Crate:
    """The module tree of a crate rooted at `src/lib.rs` (or `main.rs`), and each module's file."""

    def __init__(self, src: Path):
        self.src = src
        self.files: dict[tuple[str, ...], Path] = {}
        self.root_exports: dict[str, tuple[str, ...]] = {}
        root = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"
        self.collect((), root)
        self.root_exports = self.exports(root)

    def collect(self, module: tuple[str, ...], file: Path) -> None:
        self.files[module] = file
        code = strip_comments_and_strings(file.read_text())
        own_dir = file.parent if file.name in ("lib.rs", "main.rs", "mod.rs") else file.with_suffix("")
        for m in re.finditer(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code, re.M):
            name = m.group(1)
            for candidate in (own_dir / f"{name}.rs", own_dir / name / "mod.rs"):
                if candidate.exists():
                    self.collect(module + (name,), candidate)
                    break

    def exports(self, root: Path) -> dict[str, tuple[str, ...]]:
        """Names the root re-exports (`pub use a::b::{X, Y}`), and the module each comes from."""
        code = strip_comments_and_strings(root.read_text())
        found: dict[str, tuple[str, ...]] = {}
        for m in re.finditer(r"\bpub\s+use\s+", code):
            for segs in expand_paths(code, m.end()):
                module = self.resolve((), "crate", segs[:-1]) if len(segs) > 1 else None
                if module:
                    found[segs[-1]] = module
        return found

    def resolve(self, module: tuple[str, ...], head: str, segs: list[str]) -> tuple[str, ...] | None:
        """The deepest module that a path written in `module` names."""
        if head == "crate":
            base: tuple[str, ...] = ()
        elif head == "self":
            base = module
        else:
            base = module[:-1]
        if base == () and segs and segs[0] in self.root_exports:
            # `crate::Name` re-exported by the root is a reference to the module that defines it.
            return self.root_exports[segs[0]]
        target = base
        for s in segs:
            if s == "super":
                target = target[:-1]
                continue
            if target + (s,) in self.files:
                target = target + (s,)
            else:
                break
        return target

    def references(self) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
        refs: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
        for module, file in self.files.items():
            code = strip_comments_and_strings(file.read_text())
            for m in PATH_START.finditer(code):
                for segs in expand_paths(code, m.end()):
                    target = self.resolve(module, m.group(1), segs)
                    if target is not None and target != module:
                        refs[module].add(target)
        return refs


def circles(crate: Crate) -> list[tuple[tuple[str, ...], list[tuple[str, ...]], list[str]]]:
    """(parent module, the sibling modules of one circle, the references that make it), per circle."""
    refs = crate.references()
    found = []
    parents = {m[:-1] for m in crate.files if m}
    for parent in sorted(parents):
        children = sorted(m for m in crate.files if m[:-1] == parent and m)
        if len(children) < 2:
            continue
        child_of = lambda m: m[: len(parent) + 1] if m[: len(parent)] == parent and len(m) > len(parent) else None
        edges: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
        why: dict[tuple, list[str]] = defaultdict(list)
        for src_mod, targets in refs.items():
            a = child_of(src_mod)
            if a is None:
                continue
            for t in targets:
                b = child_of(t)
                if b is not None and b != a:
                    edges[a].add(b)
                    why[(a, b)].append(f"{crate.files[src_mod].relative_to(crate.src)} -> {'::'.join(t)}")
        for scc in strongly_connected(children, edges):
            if len(scc) > 1:
                members = set(scc)
                reasons = sorted({r for (a, b), rs in why.items() if a in members and b in members for r in rs})
                found.append((parent, scc, reasons))
    return found


def strongly_connected(nodes, edges):
    """Tarjan's algorithm: the strongly connected components of the graph."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    crate = Crate(Path(argv[1]))
    found = circles(crate)
    for parent, scc, reasons in found:
        where = "::".join(("crate",) + parent)
        print(f"import circle in {where}: {' <-> '.join('::'.join(m[len(parent):]) for m in scc)}")
        for r in reasons:
            print(f"    {r}")
    if not found:
        print(f"no import circles between the {len(crate.files) - 1} modules of {argv[1]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
