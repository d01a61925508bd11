"""The module paths of the releases before the package was laid out in folders, kept working for one release.

Owns `OLD_PATHS` (each old dotted name → the module that now holds its code) and `OldPathFinder`, the import hook
that `retromae/__init__.py` installs: `from retromae.encoder import Encoder` (or `import retromae.train`) then gives
the module `retromae.models.encoder` (the package `retromae.training`, which offers every name the old module had)
itself, the same object, with a `DeprecationWarning` naming the new path. No file stands at an old path. Importing
`retromae.finetune.*`, `retromae.adapt.*` or `retromae.quickstart` this way makes that attribute of `retromae` the
module, as it was before; the functions of those names stay in `retromae.api`. Does not own the new layout
(docs/contributing.md draws it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

_FINETUNING = ("batches", "config", "grad_cache", "memory", "model", "negatives", "plan", "run")
_ADAPTATION = ("config", "data", "distill", "guard", "queries", "run")

OLD_PATHS: dict[str, str] = {
    "retromae.cgroups": "retromae.runtime.cgroups",
    "retromae.config": "retromae.runtime.options",
    "retromae.console": "retromae.runtime.console",
    "retromae.cpu_features": "retromae.runtime.cpu_features",
    "retromae.devices": "retromae.runtime.devices",
    "retromae.errors": "retromae.runtime.errors",
    "retromae.io": "retromae.runtime.io",
    "retromae.processes": "retromae.runtime.processes",
    "retromae.run_folder": "retromae.runtime.run_folder",
    "retromae.threads": "retromae.runtime.threads",
    "retromae.data.lines": "retromae.runtime.lines",
    "retromae.encoder": "retromae.models.encoder",
    "retromae.encoder_config": "retromae.models.encoder_config",
    "retromae.export": "retromae.models.export",
    "retromae.finite": "retromae.models.finite",
    "retromae.model_card": "retromae.models.model_card",
    "retromae.model_source": "retromae.models.model_source",
    "retromae.onednn": "retromae.models.onednn",
    "retromae.pretrained": "retromae.models.pretrained",
    "retromae.tokenizer_training": "retromae.models.tokenizer_training",
    "retromae.backbones.masked_lm": "retromae.models.masked_lm",
    "retromae.long_texts": "retromae.data.long_texts",
    "retromae.train": "retromae.training",
    "retromae.checkpoint_state": "retromae.training.checkpoint_state",
    "retromae.fused_loss": "retromae.losses.fused_loss",
    "retromae.trackers": "retromae.training.trackers",
    "retromae.training_config": "retromae.training.config",
    "retromae.vocabulary_choice": "retromae.losses.vocabulary_choice",
    "retromae.pretraining.masking": "retromae.objectives.masking",
    "retromae.reranker": "retromae.reranking.run",
    "retromae.reranker_config": "retromae.reranking.config",
    "retromae.quickstart": "retromae.workflows.quickstart",
    "retromae.quickstart_config": "retromae.workflows.config",
    "retromae.finetune": "retromae.finetuning",
    **{f"retromae.finetune.{name}": f"retromae.finetuning.{name}" for name in _FINETUNING},
    "retromae.adapt": "retromae.adaptation",
    **{f"retromae.adapt.{name}": f"retromae.adaptation.{name}" for name in _ADAPTATION},
}


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module that holds its code now: that module itself, not a copy."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(f"{spec.name} is now {self.new}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module was run under its new name."""


class OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds the names of `OLD_PATHS`, and only those."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in OLD_PATHS:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(OLD_PATHS[fullname]))


def install() -> None:
    """Put the finder first on `sys.meta_path`, once: the path finder would otherwise load a second copy of
    `retromae/finetuning/run.py` as `retromae.finetune.run` (the old package's folder is the new one's)."""
    if not any(isinstance(finder, OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPathFinder())
