"""LoRA layers run as one linear each: W + s B A folded in for sampling (`merged_lora`, no autograd) and for the
shared-prefix update forward (`folded_lora`, differentiable in A and B). Both fold only plain LoRA on nn.Linear layers
(`plain_lora`) and put peft's own modules back afterwards.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F


def plain_lora(m) -> bool:
    """A peft LoRA layer whose output is base(x) + s B(A(dropout(x))) and nothing else: one active, enabled adapter on
    an nn.Linear, not merged, no DoRA or other variant (aLoRA), no LoRA bias. The layers `merged_lora` and
    `logprobs.folded_lora` fold into one linear."""
    names = list(m.active_adapters)
    return (
        len(names) == 1
        and type(m.base_layer) is torch.nn.Linear
        and not m.merged
        and not m.disable_adapters
        and not m.use_dora.get(names[0], False)
        and names[0] not in getattr(m, "lora_variant", {})
        and not getattr(m, "lora_bias", {}).get(names[0], False)
    )


def module_slots(model, names: list[str]) -> dict:
    """name -> (parent module, attribute) of each named submodule, found before any is swapped out (a module inside
    another swapped one's subtree keeps its parent object)."""
    return {n: (model.get_submodule(n.rpartition(".")[0]), n.rpartition(".")[2]) for n in names}


@contextlib.contextmanager
def merged_lora(model):
    """For the block, a peft LoRA model runs as its base with W + scale * B @ A in place of each adapted W.

    Each adapted layer then costs one matmul instead of three plus the elementwise sum (on the tiny profile: prefill
    ~40% faster, a decode step ~20%), and each LoRA (and modules_to_save) wrapper is taken out of the module tree
    for the block, so the model runs plain modules. The logits equal the adapter's up to float rounding (~1e-6).
    The original weight tensors and modules are put back afterwards (the very objects, so training and the
    optimizer never see a change).
    A model that is not plain LoRA on nn.Linear layers (`plain_lora`: DoRA, LoRA bias, 4-bit, several adapters, a
    disabled adapter) runs as it is, and so does one whose base weights are not fp32 (bf16 on a GPU): W + s B A
    rounded to bf16 (8 significant bits) drops updates below W's spacing (61% of ~1e-4 changes on the 1.3B), so the
    sampler would run another policy than the one trained; unfolded, it runs the trained forward exactly.
    """
    try:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer
        from peft.utils import ModulesToSaveWrapper
    except ImportError:  # pragma: no cover - peft is a dependency
        yield
        return
    named = (
        [(n, m) for n, m in model.named_modules() if isinstance(m, (LoraLayer, ModulesToSaveWrapper))]
        if isinstance(model, PeftModel)
        else []
    )
    lora = [m for _, m in named if isinstance(m, LoraLayer)]

    fp32 = all(getattr(getattr(m.base_layer, "weight", None), "dtype", None) == torch.float32 for m in lora)
    if not lora or not fp32 or not all(plain_lora(m) for m in lora):
        yield
        return
    parents = module_slots(model, [name for name, _ in named])
    swaps = []  # (module, attribute, original): parameters, then the wrapper modules themselves
    try:
        with torch.no_grad():
            for name, m in named:
                if isinstance(m, LoraLayer):
                    adapter = m.active_adapters[0]
                    if adapter in m.lora_A:
                        w = m.base_layer.weight
                        swaps.append((m.base_layer, "weight", w))
                        delta = m.get_delta_weight(adapter).to(w.dtype)
                        m.base_layer.weight = torch.nn.Parameter(w + delta, requires_grad=False)
                    inner = m.base_layer
                else:  # fully trained copies (modules_to_save): the original module runs with the trained parameters
                    adapters = m.active_adapters
                    inner = m.original_module
                    if len(adapters) == 1 and adapters[0] in m.modules_to_save:
                        trained = m.modules_to_save[adapters[0]]
                        for sub_name, sub in trained.named_modules():
                            target = m.original_module.get_submodule(sub_name)
                            for p_name, p in sub.named_parameters(recurse=False):
                                swaps.append((target, p_name, getattr(target, p_name)))
                                setattr(target, p_name, p)
                # the wrapper leaves the module tree for the block: the model runs plain modules (a disabled LoRA
                # layer calls its base layer and nothing else, so the numbers are the same, without the wrapper's
                # per-call checks on every layer of every decode step)
                parent, attr = parents[name]
                swaps.append((parent, attr, m))
                setattr(parent, attr, inner)
        yield
    finally:
        for module, attr, original in reversed(swaps):
            setattr(module, attr, original)


class _FoldedLinear(torch.nn.Module):
    """A plain LoRA layer as one linear, differentiable in its A and B: y = x (W + s B A)^T + b."""

    def __init__(self, layer, adapter: str):
        super().__init__()
        self.base, self.A, self.B = layer.base_layer, layer.lora_A[adapter], layer.lora_B[adapter]
        self.scale = float(layer.scaling[adapter])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.addmm(self.base.weight, self.B.weight, self.A.weight, alpha=self.scale)  # [out, in]
        return F.linear(x, w, self.base.bias)


@contextlib.contextmanager
def folded_lora(model, enabled: bool = True):
    """For the block, each plain LoRA layer of a peft model runs as `_FoldedLinear` (speed, issue 14).

    peft runs x W^T + s (x A^T) B^T: three matmuls a layer and an add. Folded, the forward is one matmul of W's size
    (plus the small B A), the backward the same count of multiply-adds, in fewer, larger matmuls: a tiny-profile
    RLOO update (forward + backward) ~5% faster (1.01-1.15x over 6 rounds). Gradients equal peft's up to float rounding
    (~1e-6 relative). Every layer is folded or none: a layer with dropout in training, a disabled or merged adapter,
    several adapters, a LoRA variant (DoRA, aLoRA), a LoRA bias, a non-Linear base (4-bit), fan_in_fan_out or mixed
    dtypes keeps the model as it is, and so does `enabled=False`."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # pragma: no cover - peft is a dependency
        yield
        return
    named = [(n, m) for n, m in model.named_modules() if isinstance(m, LoraLayer)]

    def foldable(m) -> bool:  # beyond sampling's fold: the adapter's weights here, no live dropout, one dtype
        a = m.active_adapters[0]
        if a not in m.lora_A or getattr(m, "fan_in_fan_out", False):
            return False
        dropout = m.lora_dropout[a]
        return (
            isinstance(dropout, torch.nn.Identity) or not dropout.training or dropout.p == 0
        ) and m.base_layer.weight.dtype == m.lora_A[a].weight.dtype == m.lora_B[a].weight.dtype

    if not enabled or not named or not all(plain_lora(m) and foldable(m) for _, m in named):
        yield
        return
    parents = module_slots(model, [n for n, _ in named])
    swapped = []
    try:
        for n, m in named:
            parent, attr = parents[n]
            setattr(parent, attr, _FoldedLinear(m, m.active_adapters[0]))
            swapped.append((parent, attr, m))
        yield
    finally:
        for parent, attr, m in reversed(swapped):
            setattr(parent, attr, m)
