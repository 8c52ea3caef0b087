"""No circle among the project's own imports, Python or C++, and the rooms
keep their doors (docs/design.md, "Rooms and who may include whom").

- Python: the import graph of bindings/python/cachealloc, read from the
  source (ast), with every import counted, also those inside functions: an
  import moved into a function still makes the circle, it only hides it.
  `from . import name` points at the submodule `name` when there is one,
  else at the package's __init__.
- C++: the #include "..." graph of every C++ folder of the project, by
  folder (a folder is a room: allocator/engine/pools, stats, ...) and by
  file. No circle in either, and these doors stay shut:
    allocator/engine/** never includes allocator/policy/ (the policy port
      is the engine's: engine/port/);
    allocator/ includes nothing outside allocator/ (no CUDA, no PyTorch,
      no statistics);
    no room of the library (allocator, pickle, stats, replay, lab, tools)
      includes bindings/ (benchmarks measure bindings, as tests do).
The checks themselves are tested on small made-up graphs, so a broken
finder cannot pass by finding nothing.
"""
import ast
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / "bindings" / "python" / "cachealloc"
CPP_ROOTS = ("allocator", "stats", "replay", "lab", "pickle", "tools", "bindings", "benchmarks")
LIBRARY_ROOMS = ("allocator", "pickle", "stats", "replay", "lab", "tools")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def find_cycle(graph):
    """A list of nodes [a, b, ..., a] forming a cycle of `graph` (node ->
    set of nodes), or None. Iterative DFS, O(nodes + edges)."""
    state = {}  # node -> 1 on the stack, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


# --- Python ---------------------------------------------------------------

def module_names():
    """Dotted name -> path, for every module of the package (a package's
    name maps to its __init__.py)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def python_import_graph(modules):
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in modules else source)
            for target in targets:
                # `import a.b.c` names a.b.c; keep the longest known prefix.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def test_python_imports_have_no_circle():
    modules = module_names()
    assert "cachealloc.lifecycle" in modules and len(modules) > 30
    graph = python_import_graph(modules)
    # The graph is real: known edges are there.
    assert "cachealloc._native" in graph["cachealloc.lifecycle"]
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


# --- C++ ------------------------------------------------------------------

def cpp_files():
    for root in CPP_ROOTS:
        for path in (REPO / root).rglob("*"):
            if path.suffix in (".h", ".cc", ".cpp", ".c") and "build" not in path.parts:
                yield path


def cpp_include_graphs():
    """(by file, by folder): project-relative paths -> included project paths."""
    files, folders = {}, {}
    for path in cpp_files():
        rel = path.relative_to(REPO).as_posix()
        included = {inc for inc in INCLUDE.findall(path.read_text(errors="replace"))
                    if (REPO / inc).is_file()}
        files[rel] = included
        folder = rel.rpartition("/")[0]
        folders.setdefault(folder, set()).update(
            inc.rpartition("/")[0] for inc in included if inc.rpartition("/")[0] != folder)
    return files, folders


def door_breaches(files):
    """Includes that break the rooms' rules, as 'file -> included'."""
    out = []
    for rel, included in sorted(files.items()):
        for inc in sorted(included):
            if rel.startswith("allocator/engine/") and inc.startswith("allocator/policy/"):
                out.append(f"{rel} -> {inc} (engine/ never includes policy/)")
            if rel.startswith("allocator/") and not inc.startswith("allocator/"):
                out.append(f"{rel} -> {inc} (allocator/ includes only allocator/)")
            if inc.startswith("bindings/") and rel.split("/")[0] in LIBRARY_ROOMS:
                out.append(f"{rel} -> {inc} (nothing depends on bindings/)")
    return out


def test_cpp_includes_have_no_circle_by_file_or_folder():
    files, folders = cpp_include_graphs()
    assert "allocator/engine/device_allocator.h" in files
    assert "allocator/engine/pools" in folders["allocator/engine"]  # the graph is real
    for graph, what in ((files, "file"), (folders, "folder")):
        cycle = find_cycle(graph)
        assert cycle is None, f"include circle by {what}: " + " -> ".join(cycle)


def test_cpp_rooms_keep_their_doors():
    files, _ = cpp_include_graphs()
    assert door_breaches(files) == []


# --- the checks, on made-up graphs ------------------------------------------

def test_find_cycle_finds_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y2"}, "y2": {"y"}}) == ["y", "y2", "y"]


def test_a_circle_hidden_in_a_function_is_still_a_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "cachealloc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import thing\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    graph = python_import_graph(module_names())
    assert find_cycle(graph) == ["cachealloc.a", "cachealloc.b", "cachealloc.a"]


def test_door_breaches_are_named():
    files = {
        "allocator/engine/x.h": {"allocator/policy/p.h", "allocator/engine/blocks/b.h"},
        "allocator/front/f.h": {"stats/s.h"},
        "stats/s.h": {"bindings/runtime/r.h"},
        "bindings/c_api/c.cc": {"stats/s.h", "bindings/runtime/r.h"},
        "benchmarks/pair_loop.cc": {"bindings/c_api/cachealloc.h"},
    }
    assert door_breaches(files) == [
        "allocator/engine/x.h -> allocator/policy/p.h (engine/ never includes policy/)",
        "allocator/front/f.h -> stats/s.h (allocator/ includes only allocator/)",
        "stats/s.h -> bindings/runtime/r.h (nothing depends on bindings/)",
    ]
