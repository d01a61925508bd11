"""`retromae adapt`: unsupervised adaptation of an already-trained embedder to a corpus, guarded by validation.

Modules: `config` (the options, import-light), `data` (the base's declared similarity, the held-out split and its
pseudo-queries, the input checks), `guard` (scoring the base, its checkpoints and their averages with the base on the
validation set), `run` (the stages from end to end, the export and the summary). The package itself can be called:
`retromae.adapt(config)` is `run.adapt(config)` (`retromae.callable_module.CallableModule`).
"""

import sys

from retromae.callable_module import CallableModule

__entry__ = "retromae.adapt.run:adapt"
sys.modules[__name__].__class__ = CallableModule
