"""Sums of exact per-sample gradients from one batched backward pass, for Linear/Conv2d models.

A sample's gradient of a layer's weight depends only on that sample's input to the layer (a)
and the loss gradient at the layer's output (g): g a^T for nn.Linear, the correlation of the
output gradient with the input for nn.Conv2d. With the batch loss summed over the samples,
one forward pass and one backward pass to the layers' outputs give every sample's (a, g), so
the per-sample gradients' sum and sum of squares need neither vmap nor a pass per sample:

    Linear   sum_i g_i a_i^T = G^T A      sum_i (g_i a_i^T)^2 = (G*G)^T (A*A)   (elementwise)
    Conv2d   per-sample weight gradients as one grouped convolution (a group per sample) of
             the inputs with the output gradients, then summed and squared-and-summed
    biases   sum_i g_i and sum_i g_i^2 (summed over positions first for Conv2d)

This is the same arithmetic as torch.func's vmap of grad (which also runs the weight gradient
per sample), so the results agree up to float32 rounding. Public PyTorch API only: forward
hooks, torch.autograd.grad, F.conv2d.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

Sums = dict[str, tuple[torch.Tensor, torch.Tensor]]  # parameter name -> (sum, sum of squares)


def supported_layers(model: nn.Module) -> dict[str, nn.Module] | None:
    """The layers holding the model's trainable parameters, by module name, when every one is
    an nn.Linear or an nn.Conv2d (ungrouped, zero-padded with explicit sizes) and none is
    shared with another layer; else None."""
    layers: dict[str, nn.Module] = {}
    covered: set[str] = set()
    for name, module in model.named_modules():
        own = [k for k, p in module.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        plain_conv = (
            type(module) is nn.Conv2d
            and module.groups == 1
            and module.padding_mode == "zeros"
            and not isinstance(module.padding, str)
        )
        if not (type(module) is nn.Linear or plain_conv):
            return None
        layers[name] = module
        covered.update(f"{name}.{k}" if name else k for k in own)
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    return layers if covered == trainable else None


def layer_gradient_sums(
    model: nn.Module, layers: dict[str, nn.Module], x: torch.Tensor, y: torch.Tensor
) -> Sums | None:
    """Per trainable parameter, the float32 sum and sum of squares over the samples of x of
    each sample's cross-entropy gradient; None when a layer is not called exactly once or a
    Linear layer gets other than one vector per sample (the caller then uses vmap)."""
    seen: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {name: [] for name in layers}

    def keep(name: str):
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor):
            seen[name].append((inputs[0].detach(), output))
            return output.clone()  # an in-place op downstream must not change the kept output

        return hook

    handles = [layer.register_forward_hook(keep(name)) for name, layer in layers.items()]
    try:
        with torch.enable_grad():  # a caller's no_grad must not apply (torch.func's doesn't)
            loss = F.cross_entropy(model(x), y, reduction="sum")  # each sample's own gradient
    finally:
        for handle in handles:
            handle.remove()
    if any(len(calls) != 1 for calls in seen.values()):
        return None
    inputs = {name: calls[0][0] for name, calls in seen.items()}
    if any(inputs[n].dim() != 2 for n, layer in layers.items() if isinstance(layer, nn.Linear)):
        return None
    outputs = [calls[0][1] for calls in seen.values()]
    grads = torch.autograd.grad(loss, outputs, allow_unused=True)
    if any(g is None for g in grads):
        return None
    sums: Sums = {}
    for (name, layer), g in zip(layers.items(), grads, strict=True):
        a = inputs[name]
        prefix = f"{name}." if name else ""
        if isinstance(layer, nn.Linear):
            weight = (g.T @ a, (g * g).T @ (a * a))
            bias = g
        else:
            per_sample = _conv2d_weight_per_sample(layer, a, g)
            weight = (per_sample.sum(dim=0), (per_sample * per_sample).sum(dim=0))
            bias = g.sum(dim=(2, 3))
        if layer.weight.requires_grad:
            sums[prefix + "weight"] = weight
        if layer.bias is not None and layer.bias.requires_grad:
            sums[prefix + "bias"] = (bias.sum(dim=0), (bias * bias).sum(dim=0))
    return sums


def _conv2d_weight_per_sample(layer: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """(N, O, C, kh, kw): sample n's weight gradient, the correlation of its input with its
    output gradient; one grouped convolution with the samples as groups (stride and dilation
    trade places, as in any convolution's weight gradient)."""
    n, c = a.shape[:2]
    o, kh, kw = layer.out_channels, *layer.kernel_size
    out = F.conv2d(
        a.transpose(0, 1),  # (C, N, H, W): the samples as channels
        g.reshape(n * o, 1, *g.shape[2:]),  # each sample's output gradient as O kernels
        stride=layer.dilation,
        padding=layer.padding,
        dilation=layer.stride,
        groups=n,
    )
    return out[:, :, :kh, :kw].reshape(c, n, o, kh, kw).permute(1, 2, 0, 3, 4)
