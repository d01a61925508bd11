"""How much memory a fine-tuning step needs, how much this process may use, and the gradient-caching chunk that fits.

Owns: `measure_step_memory` (the peak a step is expected to reach, from a measurement), `memory_budget` (what the
process may use) and `choose_chunk_size` (gradient caching's chunk when a step at once would not fit). Does not own
the model, the loss or gradient caching itself (`finetuning.grad_cache`).

How the peak is estimated. A step holds, beside what the process holds already, the optimiser's state (gradients
and AdamW's two moments, plus gradient caching's per-chunk gradients: `OPTIMIZER_COPIES` times the trainable
parameters) and the activations of every text it encodes with gradients at once: the whole batch, or one chunk of it
under gradient caching. Activations are measured, not guessed: a forward pass in training mode under the run's
autocast over one and over two queries (and passages) padded to the run's max lengths, counting the bytes of every
tensor autograd saves for the backward pass (once per storage, parameters left out). The difference is the bytes per
text; the rest is what a pass holds whatever its rows (e.g. autocast's copies of the weights). Those bytes are scaled
by the texts in the graph and by `ACTIVATION_OVERHEAD`, what the process holds beside the saved tensors (the
forward's temporaries and the backward's gradients, and what the allocator keeps of them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from retromae.finetuning.model import DualEncoder
from retromae.runtime.cgroups import cgroup_headroom, meminfo_available, read_setting
from retromae.runtime.options import ConfigError
from retromae.runtime.processes import local_processes

# Resident growth over a forward and backward pass of all-MiniLM-L6-v2 on the CPU, divided by the bytes autograd
# saved: 1.25 to 1.50 (64 and 256 tokens, 8 to 64 texts, fresh processes; benchmarks/activation_overhead.py).
ACTIVATION_OVERHEAD = 1.6
OPTIMIZER_COPIES = 4
# The share of the memory the process may use that a plan fills: on a CPU the machine's memory is shared with other
# work, which may grow while the run does; a GPU is the run's alone.
MEMORY_SHARE = {"cpu": 0.5, "cuda": 0.9}


@dataclass(frozen=True)
class Activations:
    """Bytes a forward pass with gradients holds for its backward: `per_text` for each text, `fixed` whatever its
    rows (both already scaled by `ACTIVATION_OVERHEAD`)."""

    per_text: int
    fixed: int

    def of(self, texts: int) -> int:
        return self.fixed + texts * self.per_text


@dataclass(frozen=True)
class StepMemory:
    """The memory a step needs: `resident` (held before training), `optimizer` (its state) and the activations of a
    query and of a passage at the run's max lengths."""

    resident: int
    optimizer: int
    queries: Activations
    passages: Activations

    def peak(self, query_count: int, passage_count: int, chunk_size: int) -> int:
        """Expected peak bytes of a step over `query_count` queries and `passage_count` passages: everything in one
        graph, or with gradient caching one chunk of queries or of passages at a time."""
        if chunk_size:
            graph = max(self.queries.of(min(chunk_size, query_count)),
                        self.passages.of(min(chunk_size, passage_count)))
        else:
            graph = self.queries.of(query_count) + self.passages.of(passage_count)
        return self.resident + self.optimizer + graph


def saved_activation_bytes(run, skip: set[int] = frozenset()) -> int:
    """Bytes of the tensors autograd saves for the backward pass while `run()` builds its graph, each storage
    counted once and storages whose address is in `skip` (parameters) left out."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in skip:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sum(storages.values())


def _padded_rows(ids: torch.Tensor, mask: torch.Tensor, rows: int, length: int,
                 pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`rows` rows of a (B, L) batch (repeated when it has fewer), padded to `length` tokens: (rows, length) each."""
    pick = torch.arange(rows, device=ids.device) % ids.shape[0]
    ids, mask = ids[pick, :length], mask[pick, :length]
    extra = length - ids.shape[1]
    return (torch.nn.functional.pad(ids, (0, extra), value=pad_id),
            torch.nn.functional.pad(mask, (0, extra), value=0))


def _activations(model: DualEncoder, tower, ids: torch.Tensor, mask: torch.Tensor, length: int,
                 pad_id: int) -> Activations:
    """A tower's measured activation bytes for one text and for a pass (see the module docstring)."""
    skip = {parameter.untyped_storage().data_ptr() for parameter in model.parameters()}
    measured = []
    for rows in (1, 2):
        inputs = _padded_rows(ids, mask, rows, length, pad_id)
        measured.append(saved_activation_bytes(lambda i=inputs: model.embed_at_once(tower, *i), skip))
    per_text = max(0, measured[1] - measured[0])
    return Activations(math.ceil(ACTIVATION_OVERHEAD * per_text),
                       math.ceil(ACTIVATION_OVERHEAD * max(0, measured[0] - per_text)))


def resident_bytes(device: torch.device) -> int:
    """What the process holds now: torch's allocated memory on CUDA, the resident set elsewhere (0 where unknown)."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    status = read_setting(Path("/proc/self/status"))
    found = re.search(r"^VmRSS:\s+([0-9]+) kB", status or "", re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


def measure_step_memory(model: DualEncoder, batch: dict[str, torch.Tensor], query_length: int,
                        passage_length: int, pad_id: int) -> StepMemory:
    """The memory a step of `model` needs, measured on the rows of `batch` (the module docstring says how). Run it
    under the step's autocast; the random state and the model's mode are left as they were."""
    device = batch["query_input_ids"].device
    training = model.training
    model.train()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        queries = _activations(model, model.query_model, batch["query_input_ids"], batch["query_attention_mask"],
                               query_length, pad_id)
        passages = _activations(model, model.passage_model, batch["passage_input_ids"],
                                batch["passage_attention_mask"], passage_length, pad_id)
    model.train(training)
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return StepMemory(resident_bytes(device), OPTIMIZER_COPIES * trainable, queries, passages)


def memory_budget(device: torch.device) -> int | None:
    """Bytes this process may use in all (what it holds plus what it may still allocate): on CUDA the device's free
    memory and what torch's allocator holds unused; elsewhere the smaller of MemAvailable and the cgroup's headroom,
    shared evenly by the processes of a launch on this machine. None where neither can be read."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return torch.cuda.memory_reserved(device) + free
    known = [value for value in (meminfo_available(), cgroup_headroom()) if value is not None]
    if not known:
        return None
    return resident_bytes(device) + min(known) // local_processes()


def choose_chunk_size(memory: StepMemory, query_count: int, passage_count: int, budget: int,
                      device_type: str) -> int:
    """0 (no gradient caching) when a step at once fits `MEMORY_SHARE` of `budget`; else the largest power-of-two
    chunk that does, 1 when none does."""
    allowed = MEMORY_SHARE.get(device_type, MEMORY_SHARE["cpu"]) * budget
    if memory.peak(query_count, passage_count, 0) <= allowed:
        return 0
    chunk = 1 << max(0, (max(query_count, passage_count) - 1).bit_length())
    while chunk > 1 and memory.peak(query_count, passage_count, chunk) > allowed:
        chunk //= 2
    return chunk


@dataclass(frozen=True)
class MemoryPlan:
    """The chunk size a run trains with, the peak it expects with it and at once, the memory it may use (None where
    unknown), and whether the chunk size was chosen here rather than given."""

    chunk_size: int
    peak: int
    at_once: int
    budget: int | None
    chosen: bool

    def describe(self) -> str:
        """The plan line's words on memory, e.g. "peak memory about 6.5 GB of the 22.0 GB this process may use,
        with gradient caching in chunks of 32 texts, chosen to fit (about 38.1 GB at once)"."""
        limit = f" of the {gigabytes(self.budget)} this process may use" if self.budget is not None else ""
        text = f"peak memory about {gigabytes(self.peak)}{limit}"
        if self.budget is not None and self.peak > self.budget:
            text = (f"peak memory about {gigabytes(self.peak)}, more than the {gigabytes(self.budget)} this process "
                    f"may use: lower --chunk-size, --batch-size or --passage-max-length")
        if not self.chunk_size:
            return text
        chosen = f", chosen to fit (about {gigabytes(self.at_once)} at once)" if self.chosen else ""
        return f"{text}, with gradient caching in chunks of {self.chunk_size} texts{chosen}"


def plan_memory(memory: StepMemory, query_count: int, passage_count: int, budget: int | None, device_type: str,
                given: int | None) -> MemoryPlan:
    """The chunk size `given` (0: no caching), else the one `choose_chunk_size` picks for `budget` (none when the
    budget is unknown); a ConfigError when a step does not fit `budget` even one text at a time."""
    at_once = memory.peak(query_count, passage_count, 0)
    if given is not None or budget is None:
        chunk = given or 0
        return MemoryPlan(chunk, memory.peak(query_count, passage_count, chunk), at_once, budget, False)
    chunk = choose_chunk_size(memory, query_count, passage_count, budget, device_type)
    peak = memory.peak(query_count, passage_count, chunk)
    if peak > budget:
        raise ConfigError(f"--chunk-size: a step needs about {gigabytes(peak)} even one text at a time, more than "
                          f"the {gigabytes(budget)} this process may use; lower --passage-max-length or free memory")
    return MemoryPlan(chunk, peak, at_once, budget, chunk > 0)


def gigabytes(count: int) -> str:
    return f"{count / 2**30:.1f} GB"
