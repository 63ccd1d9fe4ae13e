"""The package's import graph: every import goes down the layers, none closes a cycle, and the
package's own modules are imported at the top of a file (where a reader sees what it depends
on), except on the allow-list below. Read from the source with `ast`; nothing is imported.

Layers, lowest first, one package (or top-level module) each, in a strict order (a module may
import its own package and the layers below it, never a layer above):
    core          errors, console, atomic files, locks, paths, the machine, the Hub check, the version
    io            reading the user's files: bytes -> lines -> records -> checked values
    config        sections, recipe, schema, families (data), the phase plan, stage keys
    corpus        stage 0: raw text -> sentences
    tokenization  stage 1: train a tokenizer on the corpus, load any tokenizer directory
    data          stage 2: built pretraining data
    model         the encoder, its heads, checkpoints
    tasks         what training and serving share: head kinds, featurizers, windows, decoding
    train         pretraining (`bertcli pretrain`) and the loop pieces fine-tuning reuses
    finetune      the fine-tuning tasks, their engine, sweeps, distillation
    export        ONNX bundles, the predictor that runs a checkpoint or a bundle, its timing
    serve         the commands that run a model on the user's text: predict, features, embed,
                  evaluate-embed, fill-mask, evaluate
    compare       reads fine-tuning summaries (`bertcli compare`)
    info          `bertcli info`
    api           the functions the commands call (the Python entry point)
    cli_help      how --help reads
    cli_report    what a command reports: summaries, and its figures under --json
    cli           the command line
    __main__      `python -m bertcli`
The corpus sits below tokenization because the tokenizer stage reads the corpus stage's
output, and nothing in the corpus tokenizes. The tasks sit below train and finetune because
fine-tuning, export and predict feed a model the same windows through the same featurizers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LAYERS = [
    ["core"],
    ["io"],
    ["config"],
    ["corpus"],
    ["tokenization"],
    ["data"],
    ["model"],
    ["tasks"],
    ["train"],
    ["finetune"],
    ["export"],
    ["serve"],
    ["compare"],
    ["info"],
    ["api"],
    ["cli_help"],
    ["cli_report"],
    ["cli"],
    ["__main__"],
]

# In-function imports of bertcli's own modules that are there on purpose (importer, or
# (importer, imported)) -> why.
LAZY_ALLOWED = {
    "bertcli.cli": "each command imports what it runs (its stage; the recipe loader) when it runs, so "
                   "`bertcli --help` imports only typer, rich and bertcli.core, and `recipes` / `explain` "
                   "no torch, datasets or tokenizers",
    **{f"bertcli.finetune.{task}.command": "a task's command declaration is read at CLI startup, for the command "
                                           "list and `--help`; it imports the task's readers and model side (numpy, "
                                           "tokenizers, the featurizers) when the command runs, as cli.py does"
       for task in ("classification", "tagging", "qa", "embed")},
}
# Heavy third-party modules. A module that imports none of them at its top (directly or through
# its own top-level imports) may import a module that does inside the function that needs it:
# importing torch takes 1-2 s on an idle machine and ~10 s on the loaded 2-core one, and the
# checks before any work (recipes, checkpoints, inputs, `bertcli info`, `build-data`) report
# mistakes at once without it. Any other in-function import of the package's own modules fails.
HEAVY = {"torch"}
# The package's own __init__ is a facade over bertcli.api, the top layer: it loads the API on the
# first use of one of its functions (PEP 562 module __getattr__), inside that function, so that
# `import bertcli` (which every submodule import runs first) stays free of torch and of the layers
# above. It is not an edge of the import graph: nothing imports the root package for the API.
FACADE = {("bertcli", "bertcli.api")}

# Optional dependencies (extras): imported inside the functions that need them, never at a
# module's top, so bertcli imports and runs without the extra installed.
OPTIONAL = {"onnx", "onnxruntime", "onnxscript", "jieba", "tensorboard", "wandb", "mlflow"}

PACKAGE = Path(__file__).resolve().parents[1] / "bertcli"


def _modules(package: Path) -> dict[str, Path]:
    out = {}
    for p in package.rglob("*.py"):
        parts = list(p.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _resolve(name: str, modules: dict) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(package: Path):
    """(importer, imported module, line, kind) for every import of the package's own modules;
    kind: "top", "function" (inside a def) or "typing" (under `if TYPE_CHECKING:`). Also
    (importer, top-level name, line, "optional") for optional dependencies at a module's top."""
    modules = _modules(package)
    root = package.name
    edges = []
    for mod, path in modules.items():
        is_init = path.name == "__init__.py"

        def visit(node, kind, mod=mod, is_init=is_init):       # bound now: called within this iteration
            for ch in ast.iter_child_nodes(node):
                k = kind
                if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == "top":
                    k = "function"
                if isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test):
                    k = "typing"
                if isinstance(ch, (ast.Import, ast.ImportFrom)):
                    for name in _imported(ch, mod, is_init):
                        first = name.split(".")[0]
                        if first == root:
                            target = _resolve(name, modules)
                            if target and target != mod:
                                edges.append((mod, target, ch.lineno, k))
                        elif first in OPTIONAL and k == "top":
                            edges.append((mod, first, ch.lineno, "optional"))
                        elif first in HEAVY and k == "top":
                            edges.append((mod, first, ch.lineno, "heavy"))
                visit(ch, k, mod, is_init)

        visit(ast.parse(path.read_text(encoding="utf-8")), "top")
    return modules, edges


def _imported(node, mod: str, is_init: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = mod.split(".") if is_init else mod.split(".")[:-1]
        pkg = pkg[:len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    # `from a.b import c`: c may be a module (a.b.c) or a name in a.b; _resolve decides
    return [f"{base}.{a.name}" for a in node.names]


def _layer(mod: str) -> int | None:
    parts = mod.split(".")
    if len(parts) == 1:
        return 0                                  # the package root: the API facade only
    for i, group in enumerate(LAYERS):
        if parts[1] in group:
            return i
    return None


def _cycles(nodes, graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def heavy_at_import(modules, edges) -> set[str]:
    """The modules whose import imports a HEAVY module (through module-level imports only)."""
    heavy = {src for src, _, _, kind in edges if kind == "heavy"}
    top: dict[str, set] = {}
    for src, dst, _, kind in edges:
        if kind == "top":
            top.setdefault(src, set()).add(dst)
    for pkg in modules:          # importing a.b.c runs a/__init__ and a/b/__init__ first
        parts = pkg.split(".")
        for i in range(1, len(parts)):
            top.setdefault(pkg, set()).add(".".join(parts[:i]))
    changed = True
    while changed:
        changed = False
        for src, dsts in top.items():
            if src not in heavy and dsts & heavy:
                heavy.add(src)
                changed = True
    return heavy


def problems(package: Path = PACKAGE) -> list[str]:
    modules, edges = import_edges(package)
    heavy = heavy_at_import(modules, edges)
    found = []
    for mod in sorted(modules):
        if _layer(mod) is None:
            found.append(f"{mod}: in no layer (add its package to LAYERS in tests/test_layers.py)")
    graph: dict[str, set] = {}
    for src, dst, line, kind in edges:
        where = f"{modules[src].relative_to(package.parent)}:{line}"
        if kind == "heavy":
            continue
        if kind == "optional":
            found.append(f"{where}: optional dependency {dst} imported at the top of {src} "
                         "(import it inside the function that needs it)")
            continue
        low, high = _layer(src), _layer(dst)
        if (src, dst) in FACADE and kind == "function":
            continue
        if low is not None and high is not None and high > low:
            found.append(f"{where}: {src} (layer {LAYERS[low]}) imports {dst} from a higher layer {LAYERS[high]}")
        lazy_ok = (src in LAZY_ALLOWED or (src, dst) in LAZY_ALLOWED
                   or (dst in heavy and src not in heavy))
        if kind == "function" and not lazy_ok:
            found.append(f"{where}: {src} imports {dst} inside a function (move it to the top of the file"
                         + (f"; {src} imports torch anyway)" if dst in heavy else ")"))
        if kind != "typing":
            graph.setdefault(src, set()).add(dst)
    for cycle in _cycles(sorted(modules), graph):
        found.append("import cycle: " + " -> ".join(cycle))
    return found


def test_the_package_imports_only_downwards_without_cycles_or_in_function_imports():
    assert problems() == []


def test_the_allow_lists_name_real_modules():
    modules = _modules(PACKAGE)
    for key in list(LAZY_ALLOWED):
        for mod in (key,) if isinstance(key, str) else key:
            assert mod in modules, mod


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root / "bertcli"


@pytest.mark.parametrize("files, expected", [
    ({"bertcli/core/low.py": "from bertcli.model.high import f\n", "bertcli/model/high.py": "def f(): pass\n"},
     "bertcli.core.low (layer ['core']) imports bertcli.model.high from a higher layer ['model']"),
    ({"bertcli/config/low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from bertcli.data.high import T\n", "bertcli/data/high.py": "T = 1\n"},
     "bertcli.config.low (layer ['config']) imports bertcli.data.high from a higher layer ['data']"),
    ({"bertcli/model/a.py": "from bertcli.model import b\n", "bertcli/model/b.py": "import bertcli.model.a\n"},
     "import cycle: bertcli.model.a -> bertcli.model.b"),
    ({"bertcli/model/a.py": "def g():\n    from bertcli.core.low import f\n",
      "bertcli/core/low.py": "def f(): pass\n"},
     "bertcli.model.a imports bertcli.core.low inside a function"),
    ({"bertcli/train/a.py": "from . import b\n", "bertcli/train/b.py": "def h():\n    from .a import x\n"},
     "import cycle: bertcli.train.a -> bertcli.train.b"),
    ({"bertcli/export/a.py": "import onnxruntime as ort\n"}, "optional dependency onnxruntime imported at the top"),
    ({"bertcli/newthing.py": "x = 1\n"}, "bertcli.newthing: in no layer"),
    # a module that imports torch anyway gains nothing from importing a torch module lazily
    ({"bertcli/model/net.py": "import torch\n", "bertcli/model/run.py": "from bertcli.model import net as torch\n"
      "def f():\n    from bertcli.model.net import x\n"},
     "bertcli.model.run imports bertcli.model.net inside a function (move it to the top of the file; bertcli.model.run "
     "imports torch anyway)"),
])
def test_a_bad_module_is_caught(tmp_path, files, expected):
    inits = {f"bertcli/{p}/__init__.py": "" for p in ("core", "config", "data", "model", "train", "export")}
    package = _write(tmp_path, {"bertcli/__init__.py": "", **inits, **files})
    found = problems(package)
    assert any(expected in f for f in found), found


def test_a_good_module_passes(tmp_path):
    package = _write(tmp_path, {"bertcli/__init__.py": "", "bertcli/core/__init__.py": "",
                                "bertcli/model/__init__.py": "", "bertcli/export/__init__.py": "",
                                "bertcli/core/low.py": "def f(): pass\n",
                                "bertcli/model/a.py": "import json\nfrom bertcli.core.low import f\n\n"
                                                      "def g():\n    import onnx\n    return f, json, onnx\n",
                                "bertcli/model/net.py": "import torch\n",
                                "bertcli/model/deep.py": "from bertcli.model.net import torch\n",
                                # torch-free at import: may import a torch module (here through deep) on use
                                "bertcli/export/check.py": "from bertcli.model.a import g\n\n"
                                                           "def h():\n    from bertcli.model.deep import torch\n"})
    assert problems(package) == []


def test_the_version_is_one_string():
    """bertcli.core.version holds it (the layers below the API read it there); the package's
    `__version__` and pyproject.toml's `version` are the same string."""
    import tomllib

    import bertcli
    from bertcli.core.version import __version__

    assert bertcli.__version__ == __version__
    assert tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]["version"] == __version__
