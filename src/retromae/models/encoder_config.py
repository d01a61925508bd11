"""How text becomes vectors, declared apart from `retromae.models.encoder` so that parsing these options imports no
torch.

Owns: `PoolingConfig` (the pooling and whether to normalise), the names of the poolings,
`BackendOptions` (`--backend`, `--quantize`: what runs the transformer of every command that encodes texts, `adapt`
included, and the check that its libraries are installed, before torch is imported) and `EncoderOptions` (the
options of every command that loads an encoder). `retromae.models.encoder` runs them and
re-exports `PoolingConfig`, `POOLINGS` and `EncoderOptions`. Does not own the model, tokenisation or pooling math.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import TYPE_CHECKING, Any

from retromae.runtime.devices import check_device_name
from retromae.runtime.options import POSITIVE, Acts, Options, option, require
from retromae.runtime.precision import DTYPE_NAMES

if TYPE_CHECKING:
    import torch

    from retromae.models.encoder import Encoder, Towers

POOLINGS = ("cls", "mean")
BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = ("none", "int8")
SIDES = ("query", "passage")  # the texts an encoder encodes (one tower of an untied fine-tune encodes one)
PROMPT_NAMES = {"query": "query", "passage": "document"}  # a side's named prompt in config_sentence_transformers.json
# The backends offering int8 (offered only within 0.005 NDCG@10 of float32): with all-MiniLM-L6-v2 on SciFact, ONNX
# Runtime's lost 0.0020, OpenVINO's (the same int8 ONNX model) 0.0069, torch's dynamic int8 (`torch.ao`) 0.0155
# (docs/performance.md, "Inference backends").
QUANTIZED_BACKENDS = ("onnx",)
# The packages each backend needs (all in the extra of its name: `pip install 'retromae[onnx]'`): the export goes
# through torch's ONNX exporter (onnx, onnxscript) and int8 through onnxruntime's quantizer for both.
BACKEND_PACKAGES = {"onnx": ("onnxruntime", "onnx", "onnxscript"),
                    "openvino": ("openvino", "onnxruntime", "onnx", "onnxscript")}


def prefix_option(side: str, before: str, aside: str = "") -> Any:
    """The option of the text put before every text of `side` (--query-prefix, --passage-prefix) of a command:
    `before` says what it is put before (`'' for none` and `aside` follow it), and not given it is the side's named
    prompt of the model's folder (`models.encoder.side_prefix`), as every such option says."""
    return option(None, f"{before} ('' for none{aside}); default: the {PROMPT_NAMES[side]} prompt of the model's "
                        "config_sentence_transformers.json, if any")


@dataclasses.dataclass
class PoolingConfig:
    """How token states become a text vector: [CLS] state or masked mean, optionally L2-normalised."""

    pooling: str = "cls"
    normalize: bool = False

    def __post_init__(self) -> None:
        require(self.pooling in POOLINGS, "pooling", f"must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")


def check_backend(name: str) -> None:
    """ValueError naming what to install when a package `name` needs is missing."""
    missing = [package for package in BACKEND_PACKAGES.get(name, ()) if importlib.util.find_spec(package) is None]
    if missing:
        raise ValueError(f"{name} needs {', '.join(missing)}, not installed: pip install 'retromae[{name}]'")


def backend_of(backend: str | None, quantize: str | None) -> tuple[str, str]:
    """The backend and quantization options name, their defaults filled in (torch, none)."""
    return backend or BACKENDS[0], quantize or QUANTIZATIONS[0]


def beyond_torch(inference: dict[str, str]) -> dict[str, str]:
    """The entries of a record's `backend`, `quantize` (`Encoder.inference`) and `dtype` (`Encoder.precision`) that
    differ from torch in float32: what an identity made of them holds, so that one made before the backends and the
    precision were recorded (torch's float32) is unchanged."""
    defaults = {"backend": BACKENDS[0], "quantize": QUANTIZATIONS[0], "dtype": DTYPE_NAMES[0]}
    return {key: value for key, value in inference.items() if defaults.get(key) != value}


# --dtype chooses torch's autocast: the other backends compute in float32 (or int8) whatever it says.
TORCH_FLOAT = Acts(lambda config: backend_of(config.backend, config.quantize)[0] == "torch",
                   "with --backend torch (the other backends compute in float32, or int8)",
                   {"backend": "torch"}, ({"backend": "onnx"},))


WITH_QUANTIZED_BACKEND = Acts(lambda config: backend_of(config.backend, config.quantize)[0] in QUANTIZED_BACKENDS,
                             "with --backend onnx (torch's and OpenVINO's int8 lost 0.0155 and 0.0069 NDCG@10 on "
                             "SciFact, docs/performance.md)", {"backend": "onnx"},
                             ({"backend": "torch"}, {"backend": "openvino"}))


@dataclasses.dataclass(kw_only=True)
class BackendOptions(Options):
    """What runs the transformer where texts become vectors (`retromae.models.backends`); pooling stays ours."""

    OPTION_GROUP = "inference backend"

    backend: str | None = option(None, "what runs the transformer when texts are encoded: torch, onnx (ONNX Runtime) "
                                       "or openvino, the last two from an export made once per weights and kept "
                                       "(docs/formats.md); default torch (search: the backend the index's "
                                       "documents were encoded with)", choices=BACKENDS, check=check_backend)
    quantize: str | None = option(None, "none, or int8: dynamic int8 of the linear layers (docs/guide.md: its "
                                        "NDCG@10 against float32); default none (search: the quantization the "
                                        "index's documents were encoded with)", choices=QUANTIZATIONS,
                                 acts=WITH_QUANTIZED_BACKEND)


@dataclasses.dataclass(kw_only=True)
class EncoderOptions(BackendOptions):
    """Command-line options that load an encoder; commands that encode text extend this config."""

    OPTION_GROUP = "encoder"

    model: str = option(help="our exported encoder folder, a sentence-transformers folder, or any Hugging Face "
                             "encoder (folder or hub name)", reads="model")
    pooling: str | None = option(None, "pooling; default: what the model folder declares, else cls", choices=POOLINGS)
    normalize: bool | None = option(None, "L2-normalise the vectors; default: what the model folder declares, else no")
    dtype: str = option("auto", "compute precision of the torch backend; auto: bf16 (or fp16) autocast on GPU, bf16 "
                                "on a CPU with AMX ($RETROMAE_CPU_BF16=0: float32), float32 on other CPUs",
                        choices=("auto", *DTYPE_NAMES), acts=TORCH_FLOAT)
    device: str | None = option(None, "torch device: cpu, cuda, cuda:N or mps; default: this process's GPU if any",
                                check=check_device_name)
    batch_size: int = option(64, "texts per forward pass", POSITIVE)

    def load_encoder(self, device: str | torch.device | None = None, side: str | None = None) -> Encoder:
        """The encoder these options name for the texts of `side` (None: both; `Encoder.load`), on `--device`, else
        on `device`, else on the default device; the command's length options (`--query-max-length`,
        `--passage-max-length`) checked against it."""
        # torch: EncoderOptions is parsed by --help
        from retromae.models.encoder import Encoder

        encoder = Encoder.load(self.model, pooling=self.pooling, normalize=self.normalize,
                               device=self.device or device, dtype=self.dtype, backend=self.backend,
                               quantize=self.quantize, side=side)
        encoder.check_lengths(self)
        return encoder

    def load_towers(self, device: str | torch.device | None = None) -> Towers:
        """The encoder of each side: an untied fine-tune's two towers where `--model` names one
        (`model_source.tower_folder`), else one encoder for both."""
        # torch (encoder) and the model's files (model_source): EncoderOptions is parsed by --help
        from retromae.models.encoder import Towers
        from retromae.models.model_source import tower_folder

        if tower_folder(self.model, "query") is None:
            encoder = EncoderOptions.load_encoder(self, device)
            return Towers(encoder, encoder)
        return Towers(*(EncoderOptions.load_encoder(self, device, side) for side in SIDES))


def encoder_acts(acts: Acts, *names: str) -> dict[str, Acts]:
    """The `ACTS` of a command whose encoding options (those `EncoderOptions` declares, `--model` aside, and `names`)
    act only under `acts`, and under their own condition where they declare one (`--dtype`, `--quantize`)."""
    own = {field.name: field.metadata.get("acts") for field in dataclasses.fields(EncoderOptions)}
    fields = [name for name in own if name != "model"]
    return {name: acts & own[name] if own.get(name) else acts for name in (*fields, *names)}


@dataclasses.dataclass(kw_only=True)
class EncoderArguments(EncoderOptions):
    """The arguments of `Encoder.load`, `.encode` and `.tokenize` (the Python API), declared as the commands declare
    theirs (`--passage-max-length`, `--passage-prefix`), so that one check (`checked_arguments`) serves both."""

    max_length: int | None = option(None, "max tokens per text; default: the model's own", POSITIVE)
    prefix: str = option("", "text put before every text")
    overwrite: bool = option(False, "replace the files of an earlier save at the path (`Encoder.save`)")
    side: str | None = option(None, "the texts the encoder encodes, query or passage (an untied fine-tune's tower); "
                                    "default both", choices=SIDES)


def dtype_name(dtype: Any) -> Any:
    """A torch dtype as the name `--dtype` takes (`torch.float16` → "float16"); anything else as it is."""
    return dtype if isinstance(dtype, str) or dtype is None or not hasattr(dtype, "is_floating_point") else (
        str(dtype).removeprefix("torch."))


def device_name(device: Any) -> Any:
    """A torch device as the text `--device` takes (the CPU without the index a process's own device may carry:
    Accelerate's is cpu:0); anything else as it is."""
    if type(device).__name__ != "device":
        return device
    return "cpu" if device.type == "cpu" else str(device)
