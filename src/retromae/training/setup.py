"""Setting up a training run: the start every training command makes, and the precision and distribution it runs
under, on Accelerate.

Owns: `start_run` (the Accelerator, the refusal of an option that needs whole weights under FSDP or ZeRO-3, the
seeds) and `claim_output` (--output taken for the run, with the files the loop writes, `TRAINING_OUTPUTS`), which
`retromae pretrain`, `finetune` and `train-reranker` call; the Accelerator itself (`make_accelerator`: mixed
precision, `auto` being bf16 where the GPU has it; TF32 matmuls on CUDA; the processes' waiting time,
--distributed-timeout; a DeepSpeed config made to agree with the options); a model made ready to train (`prepare`:
gradient checkpointing, compiling, its optimiser and schedule); telling sharded parameters apart
(`shards_parameters`) and gathering the whole model after training (`whole_model`). Does not
own the loop (`retromae.training.loop`), checkpoints (`retromae.training.checkpoints`) or any command's model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, InitProcessGroupKwargs, set_seed
from torch import nn
from transformers import PreTrainedModel

from retromae.runtime.console import say
from retromae.runtime.cpu_features import AUTO_BF16_VARIABLE
from retromae.runtime.options import ConfigError
from retromae.runtime.precision import resolve_mixed_precision
from retromae.runtime.processes import process_state, without_gpus
from retromae.runtime.run_folder import claim_folder, input_paths, run_identity
from retromae.training.checkpoint_state import put_master_weights
from retromae.training.config import TrainingConfig
from retromae.training.optimizer import build_optimizer, build_scheduler, check_heads
from retromae.training.trackers import TENSORBOARD_DIR

# What the loop writes into --output; a command adds its exported models (cleared by --overwrite, `claim_output`).
TRAINING_OUTPUTS = ("checkpoints", "metrics.jsonl", "config.json", TENSORBOARD_DIR)


def start_run(config: TrainingConfig, unsharded: tuple[str, str] | None = None) -> Accelerator:
    """The start of every training command: its Accelerator (`make_accelerator`); when an option of the run needs the
    whole weights on process 0 (`unsharded`: the option and what to do instead), a refusal under FSDP or ZeRO-3
    (`check_unsharded`); then every generator seeded, before any model is built. The command then loads and checks
    its model and data, and takes its output (`claim_output`) before the work that writes there."""
    accelerator = make_accelerator(config)
    if unsharded is not None:
        check_unsharded(accelerator, *unsharded)
    seed_everything(config.seed)
    return accelerator


def claim_output(config: TrainingConfig, command: str, outputs: Iterable[str], accelerator: Accelerator) -> None:
    """Take --output for this run before any work (`retromae.runtime.run_folder.claim_folder`); `outputs` are the
    command's own files beside `TRAINING_OUTPUTS`."""
    claim_folder(config.output, command, run_identity(config), (*TRAINING_OUTPUTS, *outputs), resume=config.resume,
                 overwrite=config.overwrite, processes=accelerator, inputs=input_paths(config), started=False)


def make_accelerator(config: TrainingConfig) -> Accelerator:
    """The run's Accelerator; create it before any distributed work (e.g. building a data cache on rank 0 first).

    Accelerate keeps one process-wide state; it is reset (the distributed set-up kept) so that one process can run
    several trainings with different precision, as the quickstart and the tests do. The distributed set-up is made
    first (`processes.process_state`), where the processes of a launch agree on what `auto` precision is, so that
    every process trains in the main process's. Processes wait for each other up to --distributed-timeout minutes
    (rank 0 probes and mines negatives while the others wait in a collective).
    """
    AcceleratorState._reset_state(reset_partial_state=False)
    waiting = InitProcessGroupKwargs(timeout=timedelta(minutes=config.distributed_timeout))
    process_state(**waiting.to_kwargs())  # the processes agree on what `auto` is before it is resolved
    accelerator = Accelerator(mixed_precision=resolve_mixed_precision(config.mixed_precision),
                              cpu=without_gpus(), kwargs_handlers=[waiting])
    _configure_deepspeed(accelerator, config)
    use_tensor_cores(accelerator.device)
    if config.mixed_precision == "auto" and (accelerator.device.type == "cuda" or accelerator.mixed_precision != "no"):
        say(_precision_notice(accelerator.mixed_precision, accelerator.device), accelerator.is_main_process)
    return accelerator


def _configure_deepspeed(accelerator: Accelerator, config: TrainingConfig) -> None:
    """Under a DeepSpeed config the engine does as the options say: its micro-batch is --batch-size (our loop, not
    a prepared DataLoader, feeds it), and its gradient accumulation and clipping (the engine clips; the loop's call
    does not) are --gradient-accumulation-steps and --max-grad-norm, a config that says otherwise being refused.
    ZeRO-3: `_configure_zero3`."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    settings = plugin.deepspeed_config
    if plugin.zero_stage == 3:
        _configure_zero3(settings)
    if config.batch_size and settings.get("train_micro_batch_size_per_gpu") in (None, "auto"):
        settings["train_micro_batch_size_per_gpu"] = config.batch_size
    _take_option(settings, "gradient_accumulation_steps", "--gradient-accumulation-steps",
                 config.gradient_accumulation_steps)
    _take_option(settings, "gradient_clipping", "--max-grad-norm", config.max_grad_norm)


def _take_option(settings: dict[str, Any], key: str, option: str, value: float) -> None:
    """The DeepSpeed setting `key` is `option`'s `value`; ConfigError when the config gives another number."""
    found = settings.get(key, "auto")
    if found not in ("auto", value):
        raise ConfigError(f"{option} {value}: the DeepSpeed config gives {key} {found}; give the same number in both")
    settings[key] = value


def _configure_zero3(settings: dict[str, Any]) -> None:
    """Models are built whole and the engine partitions them when it starts: transformers would otherwise build
    every model partitioned (it reads the config Accelerate registers with it, whatever `zero3_init_flag` says),
    leaving empty weights to what runs before training (objectives built on the encoder, unused parameters found,
    negatives mined) and to the models an export builds. And the engine gathers the whole weights when asked
    (`stage3_gather_16bit_weights_on_model_save`, Accelerate's `zero3_save_16bit_model`), as the export does."""
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    settings.setdefault("zero_optimization", {})["stage3_gather_16bit_weights_on_model_save"] = True


def shards_parameters(accelerator: Accelerator) -> bool:
    """Whether each process holds only a shard of the parameters (FSDP, DeepSpeed ZeRO-3): a forward pass then
    gathers each layer's weights from every process, and an export needs them gathered first."""
    state = accelerator.state
    if state.distributed_type == DistributedType.FSDP:
        return True
    plugin = getattr(state, "deepspeed_plugin", None)
    return state.distributed_type == DistributedType.DEEPSPEED and plugin is not None and plugin.zero_stage == 3


def check_unsharded(accelerator: Accelerator, option: str, instead: str) -> None:
    """ConfigError naming `option`, whose work runs the model on process 0 alone while the others wait, when FSDP or
    ZeRO-3 shard the parameters (that process alone cannot gather them); `instead` says what to do."""
    if shards_parameters(accelerator):
        raise ConfigError(f"{option}: runs the model on process 0 alone, but FSDP and DeepSpeed ZeRO-3 shard its "
                          f"weights over every process; train with DDP or ZeRO-2, or {instead}")


def prepare(model: nn.Module, config: TrainingConfig,
            accelerator: Accelerator) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """`model` made ready to train as `config` says (gradient checkpointing, `torch.compile`), with its optimiser
    and schedule, the model and optimiser prepared by `accelerator` (wrapped for DDP, FSDP or DeepSpeed)."""
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if accelerator.device.type == "cuda":
        model.to(accelerator.device)  # fused AdamW needs its parameters on the device when it is built
    if config.compile:
        model.compile()  # in place: parameter names, checkpoints and exports stay those of the plain model
    optimizer = build_optimizer(model, config, fused=accelerator.device.type in ("cuda", "cpu"))
    check_heads(config, optimizer)
    scheduler = build_scheduler(optimizer, config)
    model, optimizer = accelerator.prepare(model, optimizer)
    return model, optimizer, scheduler


def whole_model(accelerator: Accelerator, model: nn.Module, build: Callable[[], nn.Module]) -> nn.Module | None:
    """The trained `model` (as prepared) with its whole weights, in float32, on the main process (None on the others):
    the unwrapped model, or under FSDP and DeepSpeed `build()` (a fresh model of the same structure) holding the full
    state dict gathered from every process, and under DeepSpeed the optimiser's float32 master weights (its engine
    holds the model itself in bf16 or fp16 under mixed precision, whatever the ZeRO stage). A collective: every
    process calls it."""
    deepspeed = accelerator.distributed_type == DistributedType.DEEPSPEED
    if not deepspeed and not shards_parameters(accelerator):
        return accelerator.unwrap_model(model) if accelerator.is_main_process else None
    state = accelerator.get_state_dict(model)
    if deepspeed:
        put_master_weights(state, accelerator.unwrap_model(model))
    if not accelerator.is_main_process:
        return None
    built = build()
    built.load_state_dict(state)
    return built


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}  # Accelerate's names → the dtype autocast uses

def _precision_notice(resolved: str, device: torch.device) -> str:
    if device.type == "cpu":
        return (f"mixed precision: bf16 autocast, the default on CPUs with AMX (--mixed-precision no, or "
                f"{AUTO_BF16_VARIABLE}=0, trains in fp32)")
    if resolved == "bf16":
        return "mixed precision: bf16 (the default on GPUs that support it; --mixed-precision no trains in fp32)"
    return "mixed precision: none, this GPU has no bf16 (--mixed-precision fp16 uses its tensor cores)"


def use_tensor_cores(device: torch.device) -> None:
    """On CUDA, let fp32 matrix products run on tensor cores (TF32, 10 mantissa bits), as bf16 autocast leaves
    some products (the loss, the optimiser's view of the weights) in fp32."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each transformer body's activations in the backward pass rather than keep them (non-reentrant)."""
    for module in model.modules():
        if not (isinstance(module, PreTrainedModel) and module.supports_gradient_checkpointing):
            continue
        if hasattr(module, "activation_checkpointing_enable"):  # transformers >= 5.x
            module.activation_checkpointing_enable({"use_reentrant": False})
        else:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch before building models, so decoder initialisation is reproducible."""
    set_seed(seed)
