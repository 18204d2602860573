#!/usr/bin/env bash
# The code's shape, checked: for every crate of the workspace,
#   1. import cycles among its modules,
#   2. functions longer than FUNCTION_LINES_MAX lines, outside tests;
#   3. no `process::exit` in kv-server below its main.rs, and
#   4. no file of kv-server, mvcc or wal over FILE_LINES_MAX lines before
#      its tests.
# Prints what it finds and exits 1 if there is any of them.
#
# Modules are the crate's files (src/a/b.rs or src/a/b/mod.rs is a::b).
# An edge a -> b is any path to `crate::b...` or `super::...` written in
# a's code, resolved to the longest module path that exists (so
# `crate::raft::node::Node` is an edge to raft::node). `#[cfg(test)]`
# modules and the tests/ folders are left out: test code may reach
# anywhere. A function's length runs from its `fn` line to its closing
# brace.
#   scripts/shape.sh            (from anywhere in the repository)
#   SHAPE_GRAPH=1 scripts/shape.sh   also prints every crate's module edges
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PYTHON'
import os
import re
import sys

FUNCTION_LINES_MAX = 70
CRATES = sorted(
    [os.path.join("crates", name) for name in os.listdir("crates")]
    + ["benches"]
)


def strip(source):
    """The source with comments, strings and char literals blanked (newlines
    kept), so braces and paths in them are not counted."""
    out = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif source.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if source.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif source.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in source[i:j]))
            i = j
        else:
            raw = re.match(r'b?r(#*)"', source[i:i + 260])
            if raw and (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_")):
                end = source.find('"' + raw.group(1), i + raw.end())
                end = n if end < 0 else end + 1 + len(raw.group(1))
                out.append("".join(ch if ch == "\n" else " " for ch in source[i:end]))
                i = end
            elif c == '"':
                j = i + 1
                while j < n and source[j] != '"':
                    j += 2 if source[j] == "\\" else 1
                out.append("".join(ch if ch == "\n" else " " for ch in source[i:j + 1]))
                i = j + 1
            elif c == "'":
                char = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'", source[i:i + 12])
                if char:
                    out.append(" " * char.end())
                    i += char.end()
                else:
                    out.append(c)
                    i += 1
            else:
                out.append(c)
                i += 1
    return "".join(out)


def without_test_modules(code):
    """Blanks `#[cfg(test)]` items (the test module, usually)."""
    while True:
        found = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code)
        if not found:
            return code
        depth, j = 1, found.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[:found.start()] + "".join(ch if ch == "\n" else " " for ch in code[found.start():j]) + code[j:]


def modules_of(src):
    """Module path (tuple) -> file, for every file under src."""
    modules = {}
    for root, _, files in os.walk(src):
        for name in files:
            # A test module in a file of its own is test code.
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, src)[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            modules[tuple(parts)] = path
    return modules


def edges_of(module, code, modules):
    targets = set()
    is_dir_module = modules[module].endswith("mod.rs") or module == ()
    for found in re.finditer(r"\b(crate|super)((?:\s*::\s*\w+)+)", code):
        names = [p.strip() for p in found.group(2).split("::") if p.strip()]
        if found.group(1) == "crate":
            base = ()
        else:
            base = module if is_dir_module else module[:-1]
            base = base[:-1]
            while names and names[0] == "super":
                base, names = base[:-1], names[1:]
        path = base + tuple(names)
        while path not in modules and path:
            path = path[:-1]
        if path != module:
            targets.add(path)
    # `use child::x` (or `self::child::x`): a path from this module down.
    for found in re.finditer(r"\buse\s+(?:self\s*::\s*)?(\w+)\s*::", code):
        here = module if is_dir_module else module[:-1]
        child = here + (found.group(1),)
        if found.group(1) not in ("crate", "super", "self") and child in modules and child != module:
            targets.add(child)
    # `use a::b` inside `use crate::{a::b, c}` groups.
    for found in re.finditer(r"\buse\s+crate\s*::\s*\{([^;]*)\}\s*;", code):
        for item in re.split(r",(?![^{]*\})", found.group(1)):
            names = [p.strip() for p in re.split(r"::", item.split("{")[0]) if p.strip()]
            path = tuple(names)
            while path not in modules and path:
                path = path[:-1]
            if path != module:
                targets.add(path)
    return targets


def cycles(graph):
    """Strongly connected components with more than one module."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


FN = re.compile(r"^[ \t]*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)", re.M)


def long_functions(path, code):
    found = []
    for match in FN.finditer(code):
        # The body starts at the first `{` after the signature, unless a
        # `;` ends it first (a trait method without a body).
        j = match.end()
        depth_paren = 0
        while j < len(code):
            ch = code[j]
            if ch in "([<":
                depth_paren += 1
            elif ch in ")]>":
                depth_paren -= 1
            elif ch == ";" and depth_paren <= 0:
                j = -1
                break
            elif ch == "{" and depth_paren <= 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        depth, k = 1, j + 1
        while k < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[k], 0)
            k += 1
        first = code.count("\n", 0, match.start()) + 1
        last = code.count("\n", 0, k - 1) + 1
        lines = last - first + 1
        if lines > FUNCTION_LINES_MAX:
            found.append((path, first, match.group(7), lines))
    return found


failed = False
for crate in CRATES:
    for src_name in ("src", "benches"):
        src = os.path.join(crate, src_name)
        if not os.path.isdir(src) or (crate == "benches" and src_name == "src"):
            continue
        modules = modules_of(src)
        graph, too_long = {}, []
        roots = {m for m in modules if m == ()}
        for module, path in modules.items():
            code = without_test_modules(strip(open(path, encoding="utf-8").read()))
            too_long += long_functions(path, code)
            # main.rs beside lib.rs is a crate of its own.
            if module == () and path.endswith("main.rs") and os.path.exists(os.path.join(src, "lib.rs")):
                continue
            graph[module] = edges_of(module, code, modules) if src_name == "src" else set()
        name = lambda m: "crate" if m == () else "::".join(m)
        if os.environ.get("SHAPE_GRAPH"):
            for module in sorted(graph):
                print(f"{crate}: {name(module)} -> {', '.join(sorted(name(t) for t in graph[module]))}")
        for component in cycles(graph):
            failed = True
            print(f"{crate}: import cycle among {len(component)} modules: {', '.join(name(m) for m in component)}")
            for module in component:
                inside = sorted(name(t) for t in graph[module] if t in component)
                print(f"    {name(module)} -> {', '.join(inside)}")
        for path, line, function, lines in sorted(too_long):
            failed = True
            print(f"{path}:{line}: fn {function} is {lines} lines (at most {FUNCTION_LINES_MAX})")
# 3. Nothing below a server's `main` exits the process: a member's fault
# stops that member (kv-server's halt.rs), and `main` alone turns it into
# the exit. The crash failpoints abort on purpose and are not exits.
for root, _, files in os.walk(os.path.join("crates", "kv-server", "src")):
    for file_name in files:
        path = os.path.join(root, file_name)
        if not file_name.endswith(".rs") or path.endswith(os.path.join("src", "main.rs")):
            continue
        code = strip(open(path, encoding="utf-8").read())
        for match in re.finditer(r"process\s*::\s*exit\b", code):
            failed = True
            line = code.count("\n", 0, match.start()) + 1
            print(f"{path}:{line}: process::exit below main (raise a halt::Fatal instead)")
# 4. No source file of the server, the store or the WAL runs past
# FILE_LINES_MAX lines before its test module: a file that long holds more
# than one concept. A file that is a test module (tests.rs) is not counted.
FILE_LINES_MAX = 600
for crate_name in ("kv-server", "mvcc", "wal"):
    for root, _, files in os.walk(os.path.join("crates", crate_name, "src")):
        for file_name in sorted(files):
            if not file_name.endswith(".rs") or file_name == "tests.rs":
                continue
            path = os.path.join(root, file_name)
            lines = 0
            for text in open(path, encoding="utf-8"):
                if text.startswith("#[cfg(test)]"):
                    break
                lines += 1
            if lines > FILE_LINES_MAX:
                failed = True
                print(f"{path}: {lines} lines before its tests (at most {FILE_LINES_MAX})")
print("shape: " + ("problems above" if failed else f"no import cycles, no function over {FUNCTION_LINES_MAX} lines, no exit below main, no file over {FILE_LINES_MAX} lines"))
sys.exit(1 if failed else 0)
PYTHON
