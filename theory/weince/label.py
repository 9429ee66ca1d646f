"""WeiNCE with label positives: the project's extension of the loss to SCL / UCL-type batches.

Every same-label batch member is a positive of an anchor (the anchor excluded), the other members
its negatives; each positive's candidate row gets the anchor's T_lambda logits with the gate of
:mod:`theory.weince.gate` computed over the anchor's negatives (Erol et al., arXiv 2606.00262;
``docs/weince.md#label-positive-variant``). The two-view loss is :func:`theory.weince.loss.weince_loss`.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import torch
import torch.nn.functional as F

from theory.options import WEINCE_TAU
from theory.validation import as_float_tensor, as_tensor
from theory.weince._inputs import check_rows, reject_meta
from theory.weince.config import DEFAULT_GATE, GateConfig
from theory.weince.gate import _label_gate
from theory.weince.logits import tlambda_logits
from theory.weince.loss import WeiNCEDiagnostics, _diagnostics, _settings

__all__ = ["weince_label_loss"]


@overload
def weince_label_loss(
    z: Any,
    labels: Any,
    *,
    tau: float = ...,
    gate: GateConfig = ...,
    normalize: bool = ...,
    check_inputs: bool = ...,
    return_diagnostics: Literal[False] = ...,
) -> torch.Tensor: ...


@overload
def weince_label_loss(
    z: Any,
    labels: Any,
    *,
    tau: float = ...,
    gate: GateConfig = ...,
    normalize: bool = ...,
    check_inputs: bool = ...,
    return_diagnostics: Literal[True],
) -> tuple[torch.Tensor, WeiNCEDiagnostics]: ...


@overload
def weince_label_loss(
    z: Any,
    labels: Any,
    *,
    tau: float = ...,
    gate: GateConfig = ...,
    normalize: bool = ...,
    check_inputs: bool = ...,
    return_diagnostics: bool,
) -> torch.Tensor | tuple[torch.Tensor, WeiNCEDiagnostics]: ...


def weince_label_loss(
    z: Any,
    labels: Any,
    *,
    tau: float = WEINCE_TAU,
    gate: GateConfig = DEFAULT_GATE,
    normalize: bool = True,
    check_inputs: bool = True,
    return_diagnostics: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, WeiNCEDiagnostics]:
    """Label-positive WeiNCE for SCL/UCL-type experiments (the project's extension of arXiv 2606.00262).

    ``docs/weince.md#label-positive-variant``. ``S = z z^T`` (cosine when ``normalize``). For
    anchor ``i``: positives ``P(i) = {j != i : y_j = y_i}``, negatives ``N(i) = {j : y_j != y_i}``
    (``K_i = |N(i)|``). The gate is the core rule applied per anchor to its own negatives
    (``k_tail,i = tail_size(K_i)``, the same tail fits, ``rho0`` over all anchors; per-anchor
    fallback ``dAIC_i = 0`` when ``n_eff,i < 2``, and ``rho0`` = the lower median when every anchor
    is in the fallback)::

        L = (1/|pairs|) sum_{i, j in P(i)} CE([T_i(S_ij), T_i(S_in) for n in N(i)], 0)

    With two views and label = instance id the gate statistics equal those of
    :func:`weince_loss` exactly; with ``lambda = 0`` it is the plain label InfoNCE (the SupCon
    "out" form with the other positives left out of each denominator). The per-anchor negative
    counts are read on the host once (to group anchors by tail size and to reject a batch
    without negatives or pairs); the statistics stay on the device.

    Args:
        z: ``(B, d)`` embeddings: a torch tensor, a numpy array or a nested sequence (the input
            rule of docs/README.md#conventions; a numpy array is used without a copy and carries
            no gradient).
        labels: ``(B,)`` integer labels (tensor, array or sequence), moved to ``z``'s device.
        tau: temperature of the linear branch, ``> 0``.
        gate: the gate hyper-parameters.
        normalize: L2-normalise ``z`` first (cosine similarities; the shortfall needs ``s <= 1``).
        check_inputs: run the fused finiteness check of ``z``.
        return_diagnostics: also return :class:`WeiNCEDiagnostics` with per-anchor ``k_tail`` and
            ``n_eff`` tensors.

    Returns:
        The scalar loss, or ``(loss, diagnostics)``.

    Shape:
        ``z`` ``(B, d)``, ``labels`` ``(B,)`` -> scalar.

    Raises:
        ValueError: bad shapes or settings, NaN / inf in ``z``, a batch with a single class (no
            negatives), or no (anchor, positive) pair (all labels distinct).
    """
    tau = _settings(tau, gate, "core")
    z = as_float_tensor(z, "z", allow_meta=True)  # a meta z is rejected below when check_inputs
    if z.dim() != 2:
        raise ValueError(f"z must be 2-D (B, d), got shape {tuple(z.shape)}")
    B = z.shape[0]
    labels = as_tensor(labels, "labels", device=z.device)
    if labels.dim() != 1 or labels.shape[0] != B:
        raise ValueError(f"labels must have shape ({B},), got {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    if B < 2:
        raise ValueError(f"need at least 2 samples, got B={B}")
    if check_inputs:
        reject_meta(z=z)
    zn = F.normalize(z, dim=1, eps=1e-12) if normalize else z
    S = zn @ zn.T
    if check_inputs:
        check_rows(S, [("z", z)], normalized=normalize)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(B, dtype=torch.bool, device=z.device)
    negmask = ~same
    posmask = same & ~eye
    counts = torch.stack([negmask.sum(dim=1), posmask.sum(dim=1)]).tolist()  # one host read
    K_list, num_pairs = counts[0], sum(counts[1])
    if min(K_list) == 0:
        raise ValueError("a batch with a single class has no negatives; the loss is undefined")
    if num_pairs == 0:
        raise ValueError("no (anchor, positive) pair: every label is a singleton; the loss is undefined")

    with torch.no_grad():
        stats = _label_gate(S.detach(), negmask, K_list, gate)
    lam = stats.lam[:, None]
    logits = tlambda_logits(S, lam, tau, gate.eps)
    lse_neg = torch.logsumexp(logits.masked_fill(~negmask, float("-inf")), dim=1, keepdim=True)
    per_pair = torch.logaddexp(logits, lse_neg) - logits  # (B, B): CE with target the positive
    loss = per_pair.masked_fill(~posmask, 0.0).sum() / num_pairs
    return (loss, _diagnostics(stats, None)) if return_diagnostics else loss
