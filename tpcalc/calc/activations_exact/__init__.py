"""The exact activation model: the tensors autograd keeps for backward, per layer part and rank.

The paper model (``tpcalc.calc.activations``, Korthikanti et al. 2022 Table 2) describes a GPT-3
layer; this package lists, for each layer part (norms; full attention MHA/GQA/MLA with q/k norm
and output gate; Gated DeltaNet; dense GeLU/SwiGLU MLP; MoE top-k), the saved tensors with shape,
dtype and split (TP / SP / CP), under explicit implementation options (``ActivationOptions``).
It is validated against PyTorch's own bookkeeping by ``tools/measure_activations.py``.
"""

from tpcalc.calc.activations_exact.layer import layer_kind, saved_tensors, shared_tensors
from tpcalc.calc.activations_exact.options import (
    ActivationOptions,
    AttentionKernel,
    Recompute,
    SoftmaxDtype,
)
from tpcalc.calc.activations_exact.records import SavedDtype, Split, TensorRecord
from tpcalc.calc.activations_exact.summary import exact_activation_terms, tensor_terms

__all__ = [
    "ActivationOptions",
    "AttentionKernel",
    "Recompute",
    "SavedDtype",
    "SoftmaxDtype",
    "Split",
    "TensorRecord",
    "exact_activation_terms",
    "layer_kind",
    "saved_tensors",
    "shared_tensors",
    "tensor_terms",
]
