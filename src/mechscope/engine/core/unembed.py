"""The logit lens' readout (final norm, unembedding, logit scale, soft-cap) in fp32.

Every metric downstream of the unembedding (NLL, JS, KL, logit differences) is a small
difference of large logits, so it must not inherit the model's dtype. A bf16 logit of
magnitude 16 is rounded to a multiple of 1/16; computed in bf16 and cast afterwards, the
lens moved smollm2's ΔNLL by up to 0.28 nats. Here the hidden state is cast to fp32 first
and the model's own modules run on fp32 copies of their parameters:

- the final norm (and any module before the last, e.g. ModernBERT's head): a per-call
  *twin* of the module holding ``p.float()`` of every parameter (``d_model`` numbers for a
  norm). The twin is a fresh object, so the call is thread-safe (the lens readout runs in a
  pool of threads beside the next forward) and the casts stay in the autograd graph, so a
  trained student's norm still receives its gradient;
- the last unembedding ``nn.Linear``: chunked over the vocabulary
  (:data:`UNEMBED_CHUNK_BYTES` of fp32 weight at a time), so an fp32 copy of a
  ``128k × 4096`` unembedding is never made whole, not even for the backward pass
  (:class:`_ChunkedLinear` recomputes each chunk's cast there).

An fp32 model (fp32 parameters, fp32 input) takes the plain module calls, bit-identical to
the model's own head.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from mechscope.models.loaded import LoadedModel

#: Bytes of fp32 unembedding weight cast at a time (rows of the vocabulary per chunk:
#: this over ``4 × d_model``). 32 MiB is 14k rows of smollm2 (4 chunks) or 2k rows of a
#: 4096-wide model, enough rows for the product to run at a large one's speed.
UNEMBED_CHUNK_BYTES = 32 * 2**20

#: Module attributes that would make a twin call the original module (accelerate replaces
#: ``forward`` on the instance with a partial bound to it) or share its hooks.
_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)


def head_modules(lm: LoadedModel) -> list[nn.Module]:
    """The final norm and the unembedding modules, in the order they are applied."""
    return [lm.final_norm(), *lm.unembed_modules()]


def head_is_fp32(lm: LoadedModel) -> bool:
    """Whether every floating parameter of the final norm and unembedding is fp32 (then the
    model's own logits already are the fp32 readout)."""
    return all(
        p.dtype == torch.float32
        for module in head_modules(lm)
        for p in module.parameters()
        if p.is_floating_point()
    )


def unembed(
    lm: LoadedModel,
    h: torch.Tensor,
    *,
    fp32: bool = True,
    vocab: torch.Tensor | None = None,  # [ids]
    out: torch.Tensor | None = None,  # [..., vocab | ids] fp32, contiguous
) -> torch.Tensor:
    """``h [..., d_model]`` -> logits ``[..., vocab]``: the model's final norm, unembedding,
    logit scale (Cohere multiplies, Granite divides) and final soft-cap (Gemma 2).

    ``fp32=True`` (default): computed in fp32 whatever the model's dtype (module
    docstring). ``fp32=False``: the model's own dtype throughout, as its forward does.
    ``vocab``: token ids, ``[..., ids]``: only those rows of the unembedding are multiplied
    (the scale and the soft-cap act on each logit alone, so the columns are the same).
    ``out``: where to write the fp32 logits (returned), without gradients. A readout of many
    chunks passes one buffer for all of them: a fresh buffer of tens of megabytes is a fresh
    mapping from the operating system, and faulting its pages in costs about a tenth of
    the product. The numbers are the same as without it.
    """
    if out is not None:
        _check_out(out, h, fp32, lm.vocab_size if vocab is None else int(vocab.numel()))
    modules = lm.unembed_modules()
    last = modules[-1]
    if vocab is not None and not isinstance(last, nn.Linear):  # an unusual head: whole
        return _into(unembed(lm, h, fp32=fp32)[..., vocab.to(h.device)], out)
    weight, bias = _rows(last, vocab)
    if not fp32 or (h.dtype == torch.float32 and head_is_fp32(lm)):
        x = lm.final_norm()(h)
        for module in modules[:-1]:
            x = module(x)
        if out is not None and weight is not None and not _has_hooks(last):
            return _scale_and_cap_(lm, _linear_into(x, weight, bias, out))
        x = last(x) if vocab is None else nn.functional.linear(x, weight, bias)
        x = _scale_and_cap(lm, x)
        return _into(x.float(), out) if fp32 else x
    x = _fp32_call(lm.final_norm(), h)
    for module in modules[:-1]:
        x = _fp32_call(module, x)
    if weight is None:  # an unusual head: a whole fp32 twin (the weight is cast in one piece)
        return _into(_scale_and_cap(lm, _fp32_call(last, x).float()), out)
    if out is not None:
        x = x.to(device=weight.device, dtype=torch.float32)
        _chunked_into(x.reshape(-1, x.shape[-1]), weight, bias, out.view(-1, out.shape[-1]))
        return _scale_and_cap_(lm, out)
    return _scale_and_cap(lm, linear_fp32(x, weight, bias).float())


def _check_out(out: torch.Tensor, h: torch.Tensor, fp32: bool, width: int) -> None:
    if not fp32 or out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError("unembed(out=...) takes a contiguous fp32 tensor and fp32=True")
    if torch.is_grad_enabled() and h.requires_grad:
        raise ValueError("unembed(out=...) writes without gradients; call it without out")
    want = (*h.shape[:-1], width)
    if tuple(out.shape) != want:
        raise ValueError(f"unembed(out=...): out is {tuple(out.shape)}, the logits are {want}")


def _has_hooks(module: nn.Module) -> bool:
    """Whether calling ``module`` does more than its ``forward`` (accelerate's device hooks
    move an offloaded weight in; a user's hook may edit the logits): then it is called."""
    return "_hf_hook" in module.__dict__ or bool(module._forward_hooks or module._forward_pre_hooks)


def _into(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``x``, or ``out`` holding a copy of it (an unusual head has no in-place path)."""
    return x if out is None else out.copy_(x)


def _linear_into(
    x: torch.Tensor,  # [..., d] fp32
    weight: torch.Tensor,  # [vocab, d] fp32
    bias: torch.Tensor | None,  # [vocab]
    out: torch.Tensor,  # [..., vocab] fp32, contiguous
) -> torch.Tensor:
    """``nn.functional.linear(x, weight, bias)`` written into ``out``, by the same product
    it calls (``addmm`` with a bias, ``mm`` without) so the numbers are the same."""
    x2 = x.reshape(-1, x.shape[-1])  # [n, d]
    o2 = out.view(-1, out.shape[-1])  # [n, vocab]
    if bias is None:
        torch.mm(x2, weight.t(), out=o2)
    else:
        torch.addmm(bias, x2, weight.t(), out=o2)
    return out


def _rows(
    head: nn.Module, vocab: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The unembedding's ``weight [vocab|ids, d]`` and ``bias``, cut to ``vocab``'s rows."""
    if not isinstance(head, nn.Linear):
        return None, None
    if vocab is None:
        return head.weight, head.bias
    ids = vocab.to(head.weight.device)
    return head.weight[ids], None if head.bias is None else head.bias[ids]


def _scale_and_cap(lm: LoadedModel, x: torch.Tensor) -> torch.Tensor:
    if lm.logit_scale is not None:
        x = x * lm.logit_scale
    if lm.logit_softcap:
        cap = lm.logit_softcap
        x = torch.tanh(x / cap) * cap
    return x


def _scale_and_cap_(lm: LoadedModel, x: torch.Tensor) -> torch.Tensor:
    """:func:`_scale_and_cap` in place (the same operations, so the same numbers)."""
    if lm.logit_scale is not None:
        x.mul_(lm.logit_scale)
    if lm.logit_softcap:
        cap = lm.logit_softcap
        x.div_(cap).tanh_().mul_(cap)
    return x


def _fp32_call(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` on an fp32 twin, with ``x`` cast to fp32 on the module's device."""
    device = next((p.device for p in module.parameters()), x.device)
    return fp32_twin(module)(x.to(device=device, dtype=torch.float32))


def fp32_twin(module: nn.Module) -> nn.Module:
    """A shallow copy of ``module`` (and its submodules) whose floating parameters and
    buffers are ``.float()`` of the originals, without hooks.

    Only the small tensors are new (a cast of an fp32 tensor is the tensor itself); the
    casts are differentiable, so gradients reach the original parameters. The original is
    never touched, so other threads may run it meanwhile.
    """
    twin = copy.copy(module)
    for name in ("forward", "_old_forward", "_hf_hook"):  # accelerate's instance wrappers
        twin.__dict__.pop(name, None)
    for name in _HOOK_DICTS:
        if name in module.__dict__:
            twin.__dict__[name] = OrderedDict()
    twin.__dict__["_parameters"] = {
        k: (None if p is None else p.float() if p.is_floating_point() else p)
        for k, p in module._parameters.items()
    }
    twin.__dict__["_buffers"] = {
        k: (None if b is None else b.float() if b.is_floating_point() else b)
        for k, b in module._buffers.items()
    }
    twin.__dict__["_modules"] = {
        k: (None if m is None else fp32_twin(m)) for k, m in module._modules.items()
    }
    return twin


def linear_fp32(
    x: torch.Tensor,  # [..., d_in] fp32
    weight: torch.Tensor,  # [vocab, d_in] any floating dtype
    bias: torch.Tensor | None = None,  # [vocab]
) -> torch.Tensor:
    """``x @ weight.T + bias`` in fp32, the weight cast a vocabulary chunk at a time:
    ``[..., vocab]`` fp32. Differentiable in ``x``, ``weight`` and ``bias``."""
    x = x.to(device=weight.device, dtype=torch.float32)
    lead = x.shape[:-1]
    out = _ChunkedLinear.apply(x.reshape(-1, x.shape[-1]), weight, bias)  # [n, vocab]
    return out.reshape(*lead, weight.shape[0])


def vocab_chunk(weight: torch.Tensor) -> int:
    """Rows of ``weight`` cast to fp32 at a time (:data:`UNEMBED_CHUNK_BYTES`)."""
    return max(1, UNEMBED_CHUNK_BYTES // (4 * weight.shape[1]))


def _chunked_into(
    x: torch.Tensor,  # [n, d_in] fp32
    weight: torch.Tensor,  # [vocab, d_in] any floating dtype
    bias: torch.Tensor | None,  # [vocab]
    out: torch.Tensor,  # [n, vocab] fp32
) -> torch.Tensor:
    """``x @ weight.T + bias`` into ``out``, the weight cast one vocabulary chunk at a time."""
    vocab, step = weight.shape[0], vocab_chunk(weight)
    for s in range(0, vocab, step):
        e = min(s + step, vocab)
        b = None if bias is None else bias[s:e].float()
        out[:, s:e] = nn.functional.linear(x, weight[s:e].float(), b)
    return out


class _ChunkedLinear(torch.autograd.Function):
    """fp32 ``x @ W.T + b`` with ``W`` in any dtype, never holding all of ``W`` in fp32:
    the backward pass casts each chunk again instead of saving the fp32 copies."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Any) -> torch.Tensor:
        n, vocab = x.shape[0], weight.shape[0]
        out = torch.empty(n, vocab, dtype=torch.float32, device=x.device)  # [n, vocab]
        _chunked_into(x, weight, bias, out)
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        ctx.bias_dtype = None if bias is None else bias.dtype
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, Any, Any]:  # grad [n, vocab]
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        vocab, step = weight.shape[0], vocab_chunk(weight)
        grad = grad.float()
        grad_x = torch.zeros_like(x) if need_x else None  # [n, d_in]
        grad_w = torch.empty_like(weight) if need_w else None  # [vocab, d_in]
        for s in range(0, vocab, step):
            e = min(s + step, vocab)
            g = grad[:, s:e]  # [n, chunk]
            if grad_x is not None:
                grad_x.addmm_(g, weight[s:e].float())
            if grad_w is not None:
                grad_w[s:e] = (g.T @ x).to(weight.dtype)
        grad_b = grad.sum(0).to(ctx.bias_dtype) if need_b and ctx.has_bias else None
        return grad_x, grad_w, grad_b


class FinalHidden:
    """The final norm's input during one pass (the last layer's residual stream, the rows
    and positions the model computed), so that the pass's logits can be the fp32 readout
    rather than the model's own low-precision head. ``handle`` removes the hook."""

    def __init__(self, lm: LoadedModel) -> None:
        self.h: torch.Tensor | None = None  # [batch, seq, d_model]
        self.handle = lm.final_norm().register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.h = args[0] if args else next(iter(kwargs.values()))

    def kept(self, keep: int | torch.Tensor) -> torch.Tensor:
        """The positions a causal LM's ``logits_to_keep=keep`` unembeds: ``[batch, kept, d]``."""
        if self.h is None:
            raise RuntimeError("the model never called its final norm in this pass")
        if isinstance(keep, int):
            return self.h[:, slice(-keep, None)]
        return self.h[:, keep.to(self.h.device)]


def logit_diff(
    logits: torch.Tensor, correct: int | torch.Tensor, wrong: int | torch.Tensor
) -> torch.Tensor:
    """``logit[correct] - logit[wrong]`` in fp32.

    With one token id each (``int``): over the last dimension of ``logits``, ``[...]``. With
    one id per row (``[b]`` tensors) of ``[b, vocab]`` logits: per row, ``[b]``.
    """
    x = logits.float()
    c, w = torch.as_tensor(correct), torch.as_tensor(wrong)
    if c.ndim == 0 and w.ndim == 0:
        return x[..., int(c)] - x[..., int(w)]
    rows = torch.arange(x.shape[0], device=x.device)
    return x[rows, c.to(x.device)] - x[rows, w.to(x.device)]
