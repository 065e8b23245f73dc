"""The exact activation model: the tensors autograd keeps for backward, per layer part and rank.

The paper model (``tpcalc.calc.activations.paper``, Korthikanti et al. 2022 Table 2) describes a
GPT-3 layer; this package lists, for each layer part (norms; full attention MHA/GQA/MLA with q/k
norm and output gate; Gated DeltaNet; dense GeLU/SwiGLU MLP; MoE top-k), the saved tensors with
shape, dtype and split (TP / SP / CP), under explicit implementation options
(``ActivationOptions``).
It is validated against PyTorch's own bookkeeping by ``tools/measure_activations.py``.
"""
