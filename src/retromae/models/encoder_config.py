"""How text becomes vectors, declared apart from `retromae.models.encoder` so that parsing these options imports no
torch.

Owns: `PoolingConfig` (the pooling and whether to normalise), the names of the poolings and compute precisions,
and `EncoderOptions` (the options of every command that loads an encoder). `retromae.models.encoder` runs them and
re-exports `PoolingConfig`, `POOLINGS` and `EncoderOptions`. Does not own the model, tokenisation or pooling math.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from retromae.runtime.options import POSITIVE, Options, option, require

if TYPE_CHECKING:
    import torch

    from retromae.models.encoder import Encoder

POOLINGS = ("cls", "mean")
DTYPE_NAMES = ("float32", "float16", "bfloat16")


@dataclasses.dataclass
class PoolingConfig:
    """How token states become a text vector: [CLS] state or masked mean, optionally L2-normalised."""

    pooling: str = "cls"
    normalize: bool = False

    def __post_init__(self) -> None:
        require(self.pooling in POOLINGS, "pooling", f"must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")


@dataclasses.dataclass(kw_only=True)
class EncoderOptions(Options):
    """Command-line options that load an encoder; commands that encode text extend this config."""

    OPTION_GROUP = "encoder"

    model: str = option(help="our exported encoder folder, a sentence-transformers folder, or any Hugging Face "
                             "encoder (folder or hub name)", reads="model")
    pooling: str | None = option(None, "pooling; default: what the model folder declares, else cls", choices=POOLINGS)
    normalize: bool | None = option(None, "L2-normalise the vectors; default: what the model folder declares, else no")
    dtype: str = option("auto", "compute precision; auto: bf16 (or fp16) autocast on GPU, bf16 on a CPU with AMX "
                                "($RETROMAE_CPU_BF16=0: float32), float32 on other CPUs",
                        choices=("auto", *DTYPE_NAMES))
    device: str | None = option(None, "torch device, e.g. cpu or cuda:1; default: this process's GPU if any")
    batch_size: int = option(64, "texts per forward pass", POSITIVE)

    def load_encoder(self, device: str | torch.device | None = None) -> Encoder:
        """The encoder these options name, on `--device`, else on `device`, else on the default device; the
        command's length options (`--query-max-length`, `--passage-max-length`) checked against it."""
        # torch: EncoderOptions is parsed by --help
        from retromae.models.encoder import Encoder

        encoder = Encoder.load(self.model, pooling=self.pooling, normalize=self.normalize,
                               device=self.device or device, dtype=self.dtype)
        encoder.check_lengths(self)
        return encoder


@dataclasses.dataclass(kw_only=True)
class EncoderArguments(EncoderOptions):
    """The arguments of `Encoder.load`, `.encode` and `.tokenize` (the Python API), declared as the commands declare
    theirs (`--passage-max-length`, `--passage-prefix`), so that one check (`checked_arguments`) serves both."""

    max_length: int | None = option(None, "max tokens per text; default: the model's own", POSITIVE)
    prefix: str = option("", "text put before every text")


def dtype_name(dtype: Any) -> Any:
    """A torch dtype as the name `--dtype` takes (`torch.float16` → "float16"); anything else as it is."""
    return dtype if isinstance(dtype, str) or dtype is None or not hasattr(dtype, "is_floating_point") else (
        str(dtype).removeprefix("torch."))


def device_name(device: Any) -> Any:
    """A torch device as the text `--device` takes; anything else as it is."""
    return str(device) if type(device).__name__ == "device" else device
