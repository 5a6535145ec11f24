#!/usr/bin/env python3
"""Import circles between the files of each crate (issue 24, item 4).

File A depends on file B when A names an item that B defines: a `use crate::..`/`super::..`
path, an inline `crate::x::y` path, or a path through a child module (`chains::build`).
Re-exports are followed to the file that defines the item, so `pub use` in a facade adds an
edge from the facade only. A circle is a strongly connected component of two files or more.

An edge from a child module's file up to an ancestor's (`super::Ctx` in `render/own.rs`) is
left out too: a child is part of its parent and sees its items by design; only the parent's
downward edges count. `--strict` keeps upward edges (then every `mod.rs` that uses a child whose
code names `super::` is a circle).

Edges from test code (an inline `#[cfg(test)] mod`, or a file declared under `#[cfg(test)]`)
are left out: a test module may use whatever it tests. `--tests` keeps them.

Usage: python3 xtask/circles.py [--tests] [--strict] [--why] [CRATE_DIR...]   (default: crates/*)
Exit status 1 when a circle exists.
"""

import os
import re
import sys
from glob import glob

ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|async\s+|const\s+|extern\s+\"C\"\s+)*"
    r"(?:fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+([A-Za-z_]\w*)",
    re.M,
)
MOD_DECL = re.compile(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")
PATH = re.compile(r"\b((?:crate|super|self|[A-Za-z_]\w*)(?:\s*::\s*(?:[A-Za-z_]\w*|\{|\*))+)")


def strip(src):
    """Comments, strings and char literals blanked, newlines kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
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
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = src.find('"' + m.group(1), i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + re.sub(r"[^\n]", " ", src[i + 2 : j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", src[i + 1 : j]) + '"')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", src[i:]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", src[i:])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Module:
    def __init__(self, path, file, test):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.test = test
        self.children = {}  # name -> Module (file modules and inline modules)
        self.items = set()
        self.reexports = {}  # name -> absolute path (tuple) of what it re-exports
        self.globs = []  # absolute module paths re-exported with `pub use x::*`


def expand_use(tree):
    """`a::{b, c::{d as e}}` -> [(['a','b'], 'b'), (['a','c','d'], 'e')]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    out = []

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        return [p.strip() for p in parts if p.strip()]

    def walk(prefix, s):
        s = s.strip()
        m = re.match(r"^(.*?)::\s*\{(.*)\}$", s, re.S)
        if m and "{" not in m.group(1):
            base = [x.strip() for x in m.group(1).split("::") if x.strip()]
            for part in split_top(m.group(2)):
                walk(prefix + base, part)
            return
        if s.startswith("{") and s.endswith("}"):
            for part in split_top(s[1:-1]):
                walk(prefix, part)
            return
        alias = None
        m = re.match(r"^(.*)\s+as\s+(\w+)$", s)
        if m:
            s, alias = m.group(1), m.group(2)
        segs = [x.strip() for x in s.split("::") if x.strip()]
        if segs == ["self"]:
            segs = []
            full = prefix
        else:
            full = prefix + segs
        out.append((full, alias or (full[-1] if full else None)))

    walk([], tree)
    return out


class Crate:
    def __init__(self, root_file):
        self.root_file = root_file
        self.files = {}  # file -> Module (the file's own module)
        self.root = self.load(root_file, (), False)

    def load(self, file, path, test):
        mod = Module(path, file, test)
        self.files[file] = mod
        src = strip(open(file).read())
        mod.src = src
        self.scan_mods(mod, src, file)
        return mod

    def child_dir(self, file):
        base = os.path.basename(file)
        if base in ("mod.rs", "lib.rs", "main.rs") or file == self.root_file:
            return os.path.dirname(file)
        return file[:-3]

    def scan_mods(self, mod, src, file):
        # Inline modules nest; file modules are found relative to the file.
        for m in MOD_DECL.finditer(src):
            attrs, name, kind = m.group(1), m.group(2), m.group(3)
            owner = self.owner_at(mod, src, m.start())
            test = owner.test or "cfg(test)" in attrs
            if kind == ";":
                pm = re.search(r'#\[path\s*=\s*"([^"]+)"\]', open(file).read()[m.start() : m.end()])
                if pm:
                    child = os.path.join(os.path.dirname(file), pm.group(1))
                else:
                    d = self.child_dir(file)
                    for p in owner.path[len(mod.path) :]:
                        d = os.path.join(d, p)
                    child = os.path.join(d, name + ".rs")
                    if not os.path.exists(child):
                        child = os.path.join(d, name, "mod.rs")
                if os.path.exists(child):
                    owner.children[name] = self.load(child, owner.path + (name,), test)
            else:
                inline = Module(owner.path + (name,), file, test)
                inline.span = (m.end() - 1, self.block_end(src, m.end() - 1))
                owner.children[name] = inline
        self.scan_items(mod, src)

    @staticmethod
    def block_end(src, open_at):
        depth = 0
        for i in range(open_at, len(src)):
            if src[i] == "{":
                depth += 1
            elif src[i] == "}":
                depth -= 1
                if depth == 0:
                    return i
        return len(src)

    def owner_at(self, mod, src, pos):
        """The innermost inline module of file module `mod` containing `pos`."""
        for child in mod.children.values():
            if child.file == mod.file and hasattr(child, "span") and child.span[0] < pos < child.span[1]:
                return self.owner_at(child, src, pos)
        return mod

    def scan_items(self, mod, src):
        for m in ITEM.finditer(src):
            self.owner_at(mod, src, m.start()).items.add(m.group(1))
        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", src):
            owner = self.owner_at(mod, src, m.start())
            for segs, alias in expand_use(m.group(2)):
                full = self.absolute(owner, segs)
                if full is None:
                    continue
                if alias == "*":
                    if m.group(1):
                        owner.globs.append(full[:-1])
                elif alias and alias != "_":
                    owner.reexports[alias] = full  # private `use` too: paths through it resolve
                    # pub or not; `use` names resolve through the importing module

    def absolute(self, mod, segs):
        """Make a path absolute from the crate root; None for other crates and std."""
        segs = list(segs)
        if not segs:
            return None
        path = list(mod.path)
        if segs[0] == "crate":
            path, segs = [], segs[1:]
        elif segs[0] in ("super", "self"):
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    path = path[:-1]
                segs = segs[1:]
        elif segs[0] in mod.children:
            pass
        else:
            return None
        return tuple(path + segs)

    def module(self, path):
        m = self.root
        for p in path:
            m = m.children.get(p)
            if m is None:
                return None
        return m

    def resolve(self, full, seen=None):
        """The file that defines the item `full` names (or the module file it stops at)."""
        seen = seen or set()
        if full in seen:
            return None
        seen.add(full)
        m = self.root
        for i, seg in enumerate(full):
            if seg == "*":
                return m.file
            if seg in m.children:
                m = m.children[seg]
                continue
            if seg in m.items:
                return m.file
            if seg in m.reexports:
                return self.resolve(m.reexports[seg] + tuple(full[i + 1 :]), seen)
            for g in m.globs:
                gm = self.module(g)
                if gm and (seg in gm.items or seg in gm.children or seg in gm.reexports):
                    return self.resolve(g + tuple(full[i:]), seen)
            return m.file
        return m.file

    def edges(self, tests, strict):
        out = {}
        self.why = {}
        ancestors = {f: {self.module(m.path[:i]).file for i in range(len(m.path))} for f, m in self.files.items()}
        for file, mod in self.files.items():
            src = mod.src
            for m in PATH.finditer(src):
                text = re.sub(r"\s+", "", m.group(1))
                owner = self.owner_at(mod, src, m.start())
                if owner.test and not tests:
                    continue
                if re.match(r"(pub(\([^)]*\))?)?use$", src[max(0, m.start() - 12) : m.start()].split()[-1] if src[max(0, m.start() - 12) : m.start()].split() else ""):
                    # a `use` tree: expand it from here to the `;`
                    end = src.find(";", m.start())
                    paths = [s for s, _ in expand_use(src[m.start() : end])]
                else:
                    paths = [[s for s in text.split("::") if s not in ("{", "*")]]
                for segs in paths:
                    full = self.absolute(owner, segs)
                    if full is None:
                        continue
                    target = self.resolve(full)
                    if target and target != file and (strict or target not in ancestors[file]):
                        out.setdefault(file, set()).add(target)
                        self.why.setdefault((file, target), set()).add("::".join(full))
        return out


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(graph) | {b for bs in graph.values() for b in bs}
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out)


def main():
    args = sys.argv[1:]
    tests = "--tests" in args
    show_edges = "--why" in args
    strict = "--strict" in args
    dirs = [a for a in args if not a.startswith("--")] or sorted(glob("crates/*")) + ["xtask"]
    found = 0
    for d in dirs:
        roots = [p for p in [os.path.join(d, "src/lib.rs"), os.path.join(d, "src/main.rs")] if os.path.exists(p)]
        roots += sorted(glob(os.path.join(d, "src/bin/*.rs")))
        for root in roots:
            crate = Crate(root)
            graph = crate.edges(tests, strict)
            for comp in sccs(graph):
                found += 1
                inside = {a: sorted(b for b in graph.get(a, ()) if b in comp) for a in comp}
                print(f"circle in {root}:")
                for a in comp:
                    print(f"  {a} -> {', '.join(inside[a])}")
                    if show_edges:
                        for b in inside[a]:
                            print(f"      {b}: {', '.join(sorted(crate.why[(a, b)]))}")
    print(f"{found} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
