"""Owns `CallableModule`: a module that can be called, so that `retromae.pretrain(...)`, `retromae.finetune(...)`,
`retromae.adapt(...)` and `retromae.quickstart(...)` run although they are also the modules that implement them
(`retromae.pretraining.run`, the `retromae.finetune` and `retromae.adapt` packages, `retromae.quickstart`)."""

from __future__ import annotations

import importlib
import types
from typing import Any

from retromae.console import quiet_by_default


class CallableModule(types.ModuleType):
    """A module that runs its `__entry__` ("module:function") when called, e.g. `retromae.pretrain(config)`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, function = self.__entry__.partition(":")
        return quiet_by_default(getattr(importlib.import_module(module), function))(*args, **kwargs)
