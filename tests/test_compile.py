"""What the GPU pays for on every step, checked on CPU: reads from the device (host synchronisations) in the
objectives' forward, counted by a dispatch hook, and the graphs torch.compile makes, counted by
torch._dynamo.explain. Masks are drawn outside the compiled modules; each compiled module is one graph."""

from __future__ import annotations

import collections

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from test_objectives import build, generator, make_batch
from torch.utils._python_dispatch import TorchDispatchMode

from retromae.models import masked_lm as backbone

# Operators whose result the host must wait for: a value read into Python (`item`, `bool`, `tolist`) or an output
# whose shape depends on the data (`nonzero`, and indexing with a boolean mask, which runs it).
READ_BACK = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero"}
INDEXING = {"index", "index_put", "index_put_"}
# torch's own: importing dynamo's compile path touches the deprecated torch.jit.script_method.
DYNAMO_IMPORT_WARNING = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
CASES = {
    "retromae enhanced": ("retromae", {}),
    "retromae basic": ("retromae", {"decoding": "basic", "decoder_layers": 2}),
    "retromae whole words": ("retromae", {"whole_word_mask": True}),
    "mlm": ("mlm", {}),
    "seed": ("seed", {}),
    "contrastive": ("contrastive", {}),
    "retromae+contrastive": ("retromae+contrastive", {}),
}


class HostReads(TorchDispatchMode):
    """Counts, by operator, every operator run inside it that makes the host wait for the device."""

    def __init__(self) -> None:
        super().__init__()
        self.found: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in READ_BACK or (name in INDEXING and _boolean_index(args)):
            self.found[name] += 1
        return func(*args, **(kwargs or {}))


def _boolean_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else []
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices)


@pytest.mark.parametrize("case", list(CASES))
def test_a_training_forward_and_backward_never_wait_for_the_device(tiny_tokenizer, case):
    """Before: 7 reads a step for RetroMAE (two `.any()` in the loss, four boolean gathers, transformers'
    `padding_mask.all()`)."""
    name, overrides = CASES[case]
    objective = build(name, tiny_tokenizer, **overrides)
    batch = make_batch(tiny_tokenizer)  # padded rows: the attention mask matters
    with HostReads() as reads:
        objective(batch, generator())["loss"].backward()
    assert dict(reads.found) == {}


def test_host_reads_are_seen():
    """The hook itself: the reads the losses used to make are counted."""
    selected = torch.tensor([[True, False, True]])
    with HostReads() as reads:
        bool(selected.any())
        torch.zeros(1, 3, 2)[selected]
    assert reads.found == {"_local_scalar_dense": 1, "index": 1}


def reference_loss(head, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss as it was: boolean gather of the labelled positions, mean cross-entropy, 0 without labels."""
    selected = labels != backbone.IGNORE_INDEX
    if not selected.any():
        return hidden.sum() * 0.0
    return F.cross_entropy(head(hidden[selected]).float(), labels[selected])


@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.3, 1.0])
def test_the_gathered_loss_equals_the_boolean_one(ratio):
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50)
    hidden = torch.randn(4, 32, 8, requires_grad=True)  # (B, L, D)
    labels = torch.randint(50, (4, 32))
    labels[torch.rand(4, 32) >= ratio] = backbone.IGNORE_INDEX
    expected = reference_loss(head, hidden, labels)
    for capacity in (backbone.label_capacity(labels.numel(), ratio), None):
        loss = backbone.masked_lm_loss(head, hidden, labels, capacity)
        torch.testing.assert_close(loss, expected)
        if ratio:
            ours, = torch.autograd.grad(loss, hidden)
            theirs, = torch.autograd.grad(expected, hidden, retain_graph=True)
            torch.testing.assert_close(ours, theirs)


def test_capacity_is_a_small_margin_over_the_mask_ratio():
    assert backbone.label_capacity(32 * 512, 0.3) / (32 * 512) < 0.35  # BERT-base's batch at length 512
    assert backbone.label_capacity(100, 0.5) == 100 and backbone.label_capacity(10_000, 0.0) == 16


def test_the_boolean_padding_mask_gives_the_same_states(tiny_tokenizer):
    objective = build("mlm", tiny_tokenizer).eval()
    batch = make_batch(tiny_tokenizer)
    ours = backbone.hidden_states(objective.encoder, batch["input_ids"], batch["attention_mask"])
    theirs = objective.encoder.base_model(input_ids=batch["input_ids"],
                                          attention_mask=batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[real], theirs[real])


def module_calls(objective, batch) -> list[tuple[torch.nn.Module, tuple, dict]]:
    """The first call (module, args, kwargs) of every module the objective compiles, in one training forward."""
    calls: dict[int, tuple] = {}

    def record(module, args, kwargs):
        calls.setdefault(id(module), (module, args, kwargs))

    hooks = [m.register_forward_pre_hook(record, with_kwargs=True) for m in objective.compiled_modules()]
    objective(batch, generator())
    for hook in hooks:
        hook.remove()
    return list(calls.values())


@pytest.mark.parametrize("case", [pytest.param(case, marks=() if case == "retromae enhanced" else pytest.mark.slow)
                                  for case in CASES])
@DYNAMO_IMPORT_WARNING
def test_every_compiled_module_is_one_graph(tiny_tokenizer, case):
    """Before: forward compiled whole, 16 graphs and 15 breaks for RetroMAE (generators, `.any()`, nonzero)."""
    name, overrides = CASES[case]
    objective = build(name, tiny_tokenizer, **overrides)
    calls = module_calls(objective, make_batch(tiny_tokenizer))
    assert len(calls) >= 2 - (name == "contrastive")  # the body, the head (unused by contrastive), the decoder
    for module, args, kwargs in calls:
        torch._dynamo.reset()
        explained = torch._dynamo.explain(module)(*args, **kwargs)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), (type(module).__name__,
                                                                                explained.break_reasons)


@DYNAMO_IMPORT_WARNING
def test_compile_compiles_the_modules_not_the_forward(tiny_tokenizer):
    objective = build("retromae", tiny_tokenizer)
    objective.compile()
    assert objective._compiled_call_impl is None
    assert all(module._compiled_call_impl is not None for module in objective.compiled_modules())
    assert len(objective.compiled_modules()) == 3  # encoder body, MLM head, the decoder layer
