"""The vocabulary projection fused with the losses taken on it, a chunk of rows at a time.

Owns: `VocabularyHead` (an MLM head split into its transform and its projection onto the vocabulary, and the
losses every objective takes on it: the mean cross-entropy over labelled rows, and DupMAE's max-pool over
positions), the chunked PyTorch kernels behind them (`linear_cross_entropy_sum`, `linear_max_pool`), the choice
of kernel (`retromae.losses.VOCABULARY_LOSSES`) and the vocabulary padded to a multiple of 64 rows inside the
loss. Does not own where the head sits in a backbone (`BackboneAdapter.vocabulary_projection`) or which rows are
labelled (objectives).

Why: RetroMAE's enhanced decoding, SEED and DupMAE project every token onto the vocabulary; unfused, the (N, V)
logits exist several times over in a step (the logits, their float32 copy, the log-softmax, their gradients):
at B = 32, L = 512 and BERT's 30,522 words, 16k x 30,522 cells, 2 GB each in float32.

- Cross-entropy (`linear_cross_entropy_sum`): for each chunk of rows, logits = x W^T + b, their log-softmax (one
  fused kernel a row) and loss, and, in the same pass, their gradient (softmax - one-hot) multiplied out into the
  gradients of x, W and b, which are stored for the backward pass (which only scales them by the incoming
  gradient). The choice against recomputing each chunk's logits in the backward pass: three matrix products a row
  instead of four, for float32 gradients of W and b held from forward to backward (V x E: 47 MB for MiniLM, 94 MB
  for BERT-base, less than the logits of one chunk of 2,048 rows). A chunk holds about `cells` logits (16 Mi
  cells, 64 MB of float32: 549 rows of BERT's vocabulary) in two buffers reused by every chunk: the gradient of W
  is read and written once a chunk, so chunks much smaller cost time (2x at 2 Mi cells on this CPU).
- DupMAE's bag-of-words max-pool over positions (`linear_max_pool`): the running maximum over chunks of positions,
  remembering where each maximum sat. Its backward needs no logits at all: each pooled cell's gradient goes to one
  position, so the gradients of x and W are two sparse-dense products of B x V x E multiply-adds instead of two
  dense B x L x V x E matrix products.
- Numerics follow the unfused path: the projection runs in the autocast dtype when autocast is on (as `nn.Linear`
  would), in the weight's dtype otherwise; the softmax and loss in float32. Padded vocabulary rows have weight 0 and
  bias `finfo.min`, so their logits never count (probability 0, no gradient), and are cut from every result.
- The matrix products run on oneDNN in float32 on the CPU (`Products`), PyTorch's elsewhere. On CUDA, Liger
  Kernel's fused linear cross-entropy (Triton) can replace the chunked loop ("liger"; optional, never a dependency).
- "chunked-torch" is chunked with PyTorch's own matrix products everywhere (MKL on the CPU): on an Intel Xeon with
  AVX-512 and AMX, MKL's float32 products beat oneDNN's (`retromae.losses.vocabulary_choice` measures which wins
  where).
- "auto" on the CPU is what `retromae.losses.vocabulary_choice` measured fastest at the run's shapes on this CPU
(unfused   unless a fused kernel beats it); where nothing was measured (the Python API), `resolved_kind` gives chunked
on the   CPU and unfused on CUDA: on one H100
  (BERT-base, B = 32, L = 512, bf16, eager) both fused paths took less memory (9.1-9.5 GiB against 15.0) but
  fewer tokens/s end to end (liger 0.73x, chunked 0.80x the unfused path for enhanced decoding): a step there is
  bound by kernel launches, which chunks multiply, and Liger reads a count back from the device at every call.
  Fused is for memory on a GPU: a larger batch or a longer L (docs/performance.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from retromae.losses import VOCABULARY_LOSSES
from retromae.models import onednn
from retromae.models.masked_lm import IGNORE_INDEX

PAD_MULTIPLE = 64  # the projection's width in whole tiles: sm90 GEMM kernels instead of sm80 ones at 30,522
CHUNK_CELLS = 2**24


def resolved_kind(kind: str, device: torch.device) -> str:
    """The vocabulary loss that `kind` runs on `device`: "auto" is unfused on CUDA (faster there, measured on an
    H100) and chunked elsewhere; any other kind is itself."""
    if kind != "auto":
        return kind
    return "unfused" if device.type == "cuda" else "chunked"


@functools.cache
def compute_dtype(tensor: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype `nn.Linear` would project `tensor` in: autocast's when it is on for the tensor's device, else the
    weight's."""
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype


def padded_projection(weight: torch.Tensor, bias: torch.Tensor | None,
                      dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """weight (V, E) and bias (V,) in `dtype`, padded to Vp rows, a multiple of 64: zero weights, bias finfo.min
    (a finite floor: its logits get probability 0 and no NaN in any dtype). Differentiable."""
    vocab = weight.shape[0]
    extra = -vocab % PAD_MULTIPLE
    bias = weight.new_zeros(vocab, dtype=dtype) if bias is None else bias.to(dtype)
    floor = torch.full((extra,), torch.finfo(dtype).min, dtype=dtype, device=weight.device)
    return F.pad(weight.to(dtype), (0, 0, 0, extra)), torch.cat([bias, floor])  # (Vp, E), (Vp,)


def chunk_size(cells: int, width: int) -> int:
    """Rows of `width` logits in a chunk of about `cells` cells (at least one)."""
    return max(1, cells // width)


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of x W^T + b; gradients computed chunk by chunk in the forward pass and stored."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                dtype: torch.dtype, cells: int, gradients: bool, use_onednn: bool) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            total, grads = _cross_entropy_chunks(x, weight, bias, labels, dtype, cells, gradients, use_onednn)
        ctx.save_for_backward(*grads)
        ctx.has_bias = bias is not None
        return total

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor):
        grad_x, grad_weight, grad_bias = ctx.saved_tensors
        grad_bias = grad_bias * grad_total if ctx.has_bias else None
        return grad_x * grad_total, grad_weight * grad_total, grad_bias, None, None, None, None, None


class Products:
    """The three matrix products of a chunk of rows against the padded projection w (Vp, E), b (Vp,): the logits
    x W^T + b, and the gradients P W (of x) and P^T x (of W) from d loss / d logits P.

    In float32 on a CPU with oneDNN, they run on oneDNN's linear with the weights reordered once per call into its
    blocked layout (`retromae.models.onednn`): on this project's AMD EPYC, MKL (PyTorch's default float32 GEMM) runs its
    AVX2 kernels and oneDNN its AVX-512 ones, 0.5x the CPU time for the first two products and 0.75x for the third
    (one chunk of MiniLM's shape, one thread); on an Intel Xeon with AMX, MKL's were faster (`use_onednn` False:
    "chunked-torch"). Elsewhere (CUDA, bf16), PyTorch's matrix products."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor, gradients: bool, use_onednn: bool = True):
        self.w, self.b = w, b
        self.onednn = use_onednn and w.device.type == "cpu" and w.dtype == torch.float32 and onednn.available()
        if self.onednn:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(w, None)  # (Vp, E)
            self.packed_t = torch.ops.mkldnn._reorder_linear_weight(w.T.contiguous(), None) if gradients else None

    def logits(self, inputs: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """x W^T + b for inputs (C, E), as F.linear computes them: (C, Vp), in `out` or a new tensor."""
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(inputs.contiguous(), self.packed, self.b, "none", [], "")
        return torch.addmm(self.b, inputs, self.w.T, out=out)

    def input_gradient(self, scores: torch.Tensor) -> torch.Tensor:
        """P W for scores P (C, Vp): (C, E)."""
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(scores, self.packed_t, None, "none", [], "")
        return scores @ self.w

    def add_weight_gradient(self, grad_w: torch.Tensor, scores: torch.Tensor, inputs: torch.Tensor) -> None:
        """grad_w (Vp, E) float32 += P^T x for scores P (C, Vp), inputs x (C, E)."""
        if self.onednn:
            packed = torch.ops.mkldnn._reorder_linear_weight(inputs.T.contiguous(), None)  # (E, C)
            grad_w += torch.ops.mkldnn._linear_pointwise(scores.T.contiguous(), packed, None, "none", [], "")
        elif scores.dtype == torch.float32:
            grad_w.addmm_(scores.T, inputs)
        else:
            grad_w += (scores.T @ inputs).float()


def _cross_entropy_chunks(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                          dtype: torch.dtype, cells: int, gradients: bool,
                          use_onednn: bool = True) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """The summed loss (float32) of x (N, E) against labels (N,), and with `gradients` those of x (N, E),
    weight (V, E) and bias (V,) for a loss gradient of 1 (else none)."""
    vocab = weight.shape[0]
    w, b = padded_projection(weight.detach(), None if bias is None else bias.detach(), dtype)  # (Vp, E), (Vp,)
    products = Products(w, b, gradients, use_onednn)
    rows = min(chunk_size(cells, w.shape[0]), x.shape[0])
    # Two buffers reused by every chunk: the logits in the compute dtype, their log-softmax (then softmax) in float32.
    logits = torch.empty((rows, w.shape[0]), dtype=dtype, device=x.device)
    scores = torch.empty((rows, w.shape[0]), dtype=torch.float32, device=x.device)
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    grad_x, grad_w, grad_b = _zero_gradients(x, w) if gradients else (None, None, None)
    for start in range(0, x.shape[0], rows):
        chunk = slice(start, start + rows)
        inputs = x[chunk].detach().to(dtype)  # (C, E)
        count = inputs.shape[0]
        chunk_logits = products.logits(inputs, logits[:count])  # (C, Vp)
        torch.log_softmax(chunk_logits, dim=1, dtype=torch.float32, out=scores[:count])  # a fused kernel per row
        labelled = (labels[chunk] != IGNORE_INDEX).float()[:, None]  # (C, 1): unlabelled rows count for nothing
        safe = labels[chunk].clamp(min=0)[:, None]  # (C, 1): any real column for unlabelled rows
        total -= (scores[:count].gather(1, safe) * labelled).sum()
        if gradients:
            probabilities = scores[:count].exp_().scatter_add_(1, safe, -torch.ones_like(labelled))  # softmax - 1hot
            _accumulate(products, probabilities, inputs, labelled, grad_x[chunk], grad_w, grad_b)
    if not gradients:
        return total, ()
    return total, (grad_x, grad_w[:vocab].to(weight.dtype), grad_b[:vocab].to(weight.dtype))


def _zero_gradients(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Accumulators of the gradients of x (N, E) and, in float32, of the padded weight (Vp, E) and bias (Vp,)."""
    return (torch.empty_like(x), torch.zeros(w.shape, dtype=torch.float32, device=x.device),
            torch.zeros(w.shape[0], dtype=torch.float32, device=x.device))


def _accumulate(products: Products, probabilities: torch.Tensor, inputs: torch.Tensor, labelled: torch.Tensor,
                grad_x: torch.Tensor, grad_w: torch.Tensor, grad_b: torch.Tensor) -> None:
    """Add one chunk's gradients. probabilities (C, Vp) float32: softmax - one-hot, d loss / d logits of every row
    (unlabelled rows are left out by `labelled` (C, 1) here, in the matrix products, instead of a pass over the
    chunk); inputs (C, E) in the compute dtype; grad_x (C, E) written, grad_w (Vp, E) and grad_b (Vp,) float32
    accumulated."""
    grad_b.addmv_(probabilities.T, labelled[:, 0])
    scores = probabilities.to(inputs.dtype)  # as the unfused path hands its gradient to a low-precision matmul
    grad_x.copy_(products.input_gradient(scores) * labelled)
    products.add_weight_gradient(grad_w, scores, inputs * labelled.to(inputs.dtype))


def linear_cross_entropy_sum(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                             labels: torch.Tensor, cells: int = CHUNK_CELLS, use_onednn: bool = True) -> torch.Tensor:
    """Σ over labelled rows of cross-entropy(x W^T + b, label), float32; x (N, E), weight (V, E), bias (V,) or
    None, labels (N,) with -100 for rows that do not count. The (N, V) logits never exist: chunks of about
    `cells` logits, forward and backward. Equal to F.cross_entropy(F.linear(x, weight, bias).float(), labels,
    reduction="sum") to float tolerance, gradients included. `use_onednn` False: PyTorch's products throughout."""
    dtype = compute_dtype(x, weight)
    gradients = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    return _LinearCrossEntropy.apply(x, weight, bias, labels, dtype, cells, gradients, use_onednn)


def liger_cross_entropy_sum(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                            labels: torch.Tensor) -> torch.Tensor:
    """`linear_cross_entropy_sum` on Liger Kernel's fused linear cross-entropy (CUDA, Triton), on the padded
    projection in the compute dtype."""
    # Liger Kernel, optional: only when chosen (--vocabulary-loss liger)
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    if x.device.type != "cuda":
        raise ValueError("the liger vocabulary loss runs on CUDA only; use chunked (or auto) on this device")
    dtype = compute_dtype(x, weight)
    w, b = padded_projection(weight, bias, dtype)
    with torch.autocast("cuda", enabled=False):
        loss = liger_fused_linear_cross_entropy(x.to(dtype), w, labels, bias=b, ignore_index=IGNORE_INDEX,
                                                reduction="sum")
    return loss.float()


class _LinearMaxPool(torch.autograd.Function):
    """max over positions of x W^T + b at visible positions, with the argmax kept for a sparse backward pass."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, visible: torch.Tensor,
                dtype: torch.dtype, cells: int, use_onednn: bool) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            pooled, where = _max_pool_chunks(x.detach(), weight.detach(), None if bias is None else bias.detach(),
                                             visible, dtype, cells, use_onednn)
        ctx.save_for_backward(x, weight, where, visible)
        ctx.has_bias = bias is not None
        return pooled

    @staticmethod
    def backward(ctx, grad_pooled: torch.Tensor):
        x, weight, where, visible = ctx.saved_tensors
        grad_x, grad_weight, grad_bias = _max_pool_gradients(x, weight, where, visible, grad_pooled)
        return grad_x, grad_weight, grad_bias if ctx.has_bias else None, None, None, None, None


def _max_pool_chunks(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, visible: torch.Tensor,
                     dtype: torch.dtype, cells: int, use_onednn: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """pooled (B, V) float32, the maximum over visible positions of the logits of x (B, L, E), and where (B, V)
    the position it sat at; positions a chunk at a time with a running maximum."""
    batch, length, _ = x.shape
    vocab = weight.shape[0]
    w, b = padded_projection(weight, bias, dtype)  # (Vp, E), (Vp,)
    products = Products(w, b, gradients=False, use_onednn=use_onednn)
    floor = torch.finfo(torch.float32).min
    pooled = torch.full((batch, w.shape[0]), floor, device=x.device)  # (B, Vp)
    where = torch.zeros((batch, w.shape[0]), dtype=torch.long, device=x.device)  # (B, Vp)
    positions = chunk_size(cells, batch * w.shape[0])
    for start in range(0, length, positions):
        chunk = slice(start, start + positions)
        inputs = x[:, chunk].to(dtype)  # (B, P, E)
        logits = products.logits(inputs.flatten(0, 1), None).float().view(batch, inputs.shape[1], -1)  # (B, P, Vp)
        logits.masked_fill_(~visible[:, chunk, None], floor)
        top, index = logits.max(dim=1)  # (B, Vp) each
        higher = top > pooled  # the first maximum wins a tie, as within one chunk
        pooled = torch.where(higher, top, pooled)
        where = torch.where(higher, index + start, where)
    return pooled[:, :vocab], where[:, :vocab]


def _max_pool_gradients(x: torch.Tensor, weight: torch.Tensor, where: torch.Tensor, visible: torch.Tensor,
                        grad_pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of x (B, L, E), weight (V, E) and bias (V,) from that of the pooled logits (B, V): cell (b, v)
    sends its gradient to position where[b, v] alone (none when that position was hidden, as masked_fill's
    backward does). So d loss / d logits is a sparse (B·L, V) matrix S with B·V entries, and the gradients are two
    sparse-dense products, S W and S^T x: B·V·E multiply-adds instead of the dense path's 2·B·L·V·E."""
    batch, length, width = x.shape
    vocab = weight.shape[0]
    grad = grad_pooled.float() * visible.gather(1, where)  # (B, V)
    rows = (where + torch.arange(batch, device=x.device)[:, None] * length).flatten()  # (B·V,) flattened positions
    columns = torch.arange(vocab, device=x.device).repeat(batch)  # (B·V,)
    sparse = torch.sparse_coo_tensor(torch.stack([rows, columns]), grad.flatten(), (batch * length, vocab),
                                     check_invariants=False).coalesce()  # (B·L, V)
    grad_x = torch.sparse.mm(sparse, weight.float()).view(batch, length, width)
    grad_w = torch.sparse.mm(sparse.t().coalesce(), x.reshape(batch * length, width).float())  # (V, E)
    return grad_x.to(x.dtype), grad_w.to(weight.dtype), grad.sum(dim=0).to(weight.dtype)


def linear_max_pool(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, visible: torch.Tensor,
                    cells: int = CHUNK_CELLS, use_onednn: bool = True) -> torch.Tensor:
    """(B, V) float32: per row, the maximum over the visible positions (B, L) bool of the logits x W^T + b of
    x (B, L, E), the (B, L, V) logits never held at once; finfo.min where a row has no visible position."""
    return _LinearMaxPool.apply(x, weight, bias, visible.bool(), compute_dtype(x, weight), cells, use_onednn)


@dataclass(frozen=True)
class VocabularyHead:
    """An MLM head as the losses use it: `head` whole (the unfused path), `transform` and `projection` its two
    parts (`BackboneAdapter.vocabulary_projection`), `kind` one of `VOCABULARY_LOSSES`. Not a module, so that an
    objective holding one registers no parameter twice."""

    head: nn.Module
    transform: nn.Module
    projection: nn.Linear
    kind: str = "auto"
    cells: int = CHUNK_CELLS

    def __post_init__(self) -> None:
        if self.kind not in VOCABULARY_LOSSES:
            raise ValueError(f"vocabulary loss {self.kind!r}: choose from {', '.join(VOCABULARY_LOSSES)}")

    @property
    def resolved(self) -> str:
        """The kind that runs where the projection's weight now lives (`resolved_kind`)."""
        return resolved_kind(self.kind, self.projection.weight.device)

    @property
    def use_onednn(self) -> bool:
        """Whether the chunked products may run on oneDNN ("chunked"; "chunked-torch": PyTorch's own)."""
        return self.resolved != "chunked-torch"

    @property
    def fused(self) -> bool:
        return self.resolved != "unfused"

    def loss_sum(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Σ over labelled rows of the cross-entropy of states hidden (N, D) against labels (N,) (-100: none)."""
        if not self.fused:
            logits = self.head(hidden)  # (N, V)
            return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")
        states = self.transform(hidden)  # (N, E)
        weight, bias = self.projection.weight, self.projection.bias
        if self.kind == "liger":
            return liger_cross_entropy_sum(states, weight, bias, labels)
        return linear_cross_entropy_sum(states, weight, bias, labels, self.cells, self.use_onednn)

    def loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the labelled rows of hidden (N, D), labels (N,); 0 without any."""
        return self.loss_sum(hidden, labels) / (labels != IGNORE_INDEX).sum().clamp(min=1)

    def max_pool(self, hidden: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """(B, V) float32: the maximum over visible positions (B, L) of the logits of hidden (B, L, D), fused (the
        unfused path is the head's logits, then their maximum: `retromae.objectives.dupmae`)."""
        projection = self.projection
        return linear_max_pool(self.transform(hidden), projection.weight, projection.bias, visible, self.cells,
                               self.use_onednn)
