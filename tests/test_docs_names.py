"""Every name the docs give resolves (issue 64), as `test_docs_links` checks links: a dotted `retromae.…` name in a
docstring of the package or in docs/*.md is a module or an attribute of one, and a backticked module path
(`training/loop.py`, `retromae/api.py`) is a file of the package. Read from the source with `ast` (nothing imported).

Names the docs cite as former ones (the paths before a move, in the changelog and the "before and after" tables)
are listed in `FORMER`, so that a stale name elsewhere is caught.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "retromae"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DOTTED = re.compile(r"(?<![\w./-])retromae(?:\.[A-Za-z_]\w*)+")
MODULE_PATH = re.compile(r"`((?:[a-z_]+/)*[a-z_]+\.py)`")
# Names the docs cite as what stood before a move (docs/changelog.md, docs/contributing.md's tables of the layouts).
FORMER = {
    "retromae.train", "retromae.encoder", "retromae.config", "retromae.finetune.run", "retromae.adapt.guard",
    "retromae.pretraining.masking", "retromae.runtime.old_paths", "retromae.finetune.run.finetune",
    "retromae.train.Trainer.run", "train.py", "pretrain_config.py", "quickstart_config.py", "adapt/config.py",
}
# Files of other projects the docs cite (the papers' code).
ELSEWHERE = {"modeling.py", "modeling_duplex.py", "src/moco.py", "src/pretrain/modeling_duplex.py", "simcse/models.py",
             "planted.py"}


@cache
def definitions(path: Path) -> tuple[set[str], dict[str, set[str]], str]:
    """The names a module defines at its top level, each class's own names, and its text (for lazy names)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    for node in tree.body:
        names |= _bound(node)
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports
            for inner in node.body + node.orelse:
                names |= _bound(inner)
        if isinstance(node, ast.ClassDef):
            classes[node.name] = set().union(*(_bound(inner) for inner in node.body)) if node.body else set()
    return names, classes, text


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, ast.Assign):
        return {name.id for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def module_file(dotted: str) -> Path | None:
    parts = dotted.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if parts and candidate.is_file() or not parts and (PACKAGE / "__init__.py").is_file():
            return candidate if parts else PACKAGE / "__init__.py"
    return None


def resolves(dotted: str) -> bool:
    """A module, or a name a module defines (at its top level, in a class it defines, or lazily: a string naming
    it in the module, as `retromae/__init__.py`'s table of its public names)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        names, classes, text = definitions(path)
        if rest[0] not in names:  # offered lazily: `"Encoder": "retromae.models.encoder:Encoder"`, or named alone
            home = re.search(rf'"{rest[0]}": "(retromae[\w.]*):(\w+)"', text)
            if home:
                return resolves(".".join([*home.groups(), *rest[1:]]))
            return len(rest) == 1 and f'"{rest[0]}"' in text
        return len(rest) == 1 or rest[0] not in classes or rest[1] in classes[rest[0]] or len(rest) > 2
    return False


def docstrings(path: Path) -> str:
    """The docstrings of every module, class and function of one module of the package, one after the other."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return "\n".join(ast.get_docstring(node, clean=False) or "" for node in [tree, *ast.walk(tree)]
                     if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))


# Each module's docstrings, and each page of docs/ (where names cited as former ones, `FORMER`, are let be).
SOURCES = [path.relative_to(ROOT).as_posix() for path in [*sorted(PACKAGE.rglob("*.py")), *DOCS]]
FOLDERS = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
# A short dotted name in backticks (`retrieval.encode`, `adapt.guard`) starting with one of these is read as under
# `retromae.`: the package's folders, and the folders' names before issue 52 (so that a name left by a move is seen).
SHORT_STARTS = FOLDERS | {"api", "cli", "preflight", "adapt", "finetune", "train"}
FILE_SUFFIXES = {"py", "json", "jsonl", "npy", "md", "tsv", "txt", "yaml", "csv", "trec", "png", "gz", "parquet"}
SHORT = re.compile(r"`([a-z_]+(?:\.[A-Za-z_]\w*)+)`")


def text_of(source: str) -> str:
    path = ROOT / source
    return docstrings(path) if path.suffix == ".py" else path.read_text(encoding="utf-8")


def names_in(text: str) -> set[str]:
    """The dotted names of `text`: `retromae.…` ones, and short ones in backticks under a folder of the package."""
    short = {f"retromae.{name}" for name in SHORT.findall(text)
             if name.split(".")[0] in SHORT_STARTS and name.rsplit(".", 1)[-1] not in FILE_SUFFIXES}
    return set(DOTTED.findall(text)) | short


def module_path_exists(name: str) -> bool:
    """A backticked `folder/module.py` is a file of the package (or of the repository); a bare `module.py` one in
    some folder of the package or of the repository."""
    if "/" in name:
        return (PACKAGE / name).is_file() or (ROOT / name).is_file() or (ROOT / "src" / name).is_file()
    return any(PACKAGE.rglob(name)) or any(ROOT.glob(f"*/{name}")) or (ROOT / name).is_file()


def former(source: str) -> set[str]:
    return FORMER if source.startswith("docs/") else set()


@pytest.mark.parametrize("source", SOURCES)
def test_every_dotted_name_resolves(source):
    stale = sorted(name for name in names_in(text_of(source)) - former(source) if not resolves(name))
    assert stale == [], f"{source}: names nothing: {stale}"


@pytest.mark.parametrize("source", SOURCES)
def test_every_backticked_module_path_exists(source):
    paths = set(MODULE_PATH.findall(text_of(source))) - former(source) - ELSEWHERE
    assert sorted(name for name in paths if not module_path_exists(name)) == [], source


def test_the_resolver_sees_a_stale_name():
    assert resolves("retromae.training.loop.Trainer") and resolves("retromae.api")
    assert not resolves("retromae.training.losses") and not resolves("retromae.finetune.run")
    assert names_in("see `adapt.guard` and `config.json`") == {"retromae.adapt.guard"}
