"""Measure the bytes autograd saves for backward in one transformer layer, on CPU, in BF16.

Builds one rank's share of a layer from a ``ModelSpec`` and ``ActivationOptions`` (GPT-3 style:
LayerNorm, MHA, GeLU 4h, dropout; Llama style: RMSNorm, GQA, RoPE, SwiGLU; Qwen full attention:
q/k RMSNorm, sigmoid output gate), runs forward under ``saved_tensors_hooks`` and adds up every
saved tensor's storage once, parameters excluded. One process plays one rank: heads and FFN
columns are divided by t (TP); with SP the norm/dropout/residual region has s/t tokens, the
all-gather before a column-parallel linear is a concatenation and the linear keeps only the
local shard (as Megatron does), and the reduce-scatter keeps one token slice.
Real PyTorch: Linear, GeLU, LayerNorm (fp32 weights, so fp32 statistics), the Hugging Face
unfused RMSNorm, softmax, ``torch.native_dropout`` (1-byte mask as on GPU), SDPA (CPU flash or
math kernel), reentrant ``torch.utils.checkpoint`` (as Megatron's). Custom autograd Functions that
save what a GPU kernel saves: TE fused RMSNorm (input, fp32 1/rms), Megatron ``bias_swiglu_impl``
(input), TE fused RoPE (the fp32 table), the SP gather-linear. Flash with dropout is not measured.
``measure_head`` does the same for the last stage's loss head (final norm + output layer), and
``measure_mtp_input`` for an MTP module's two norms and eh_proj.

Usage (needs torch==2.13.0): python tools/measure_activations.py [--model M --opt t=8 ...]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch.autograd.graph import saved_tensors_hooks
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from tpcalc.calc.activations.exact.layer import rope_dim, saved_tensors, shared_tensors
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.choices import AttentionKernel, Recompute, SoftmaxDtype
from tpcalc.specs import ModelSpec

EPS = 1e-5
DROPOUT_P = 0.1
INIT_STD = 0.02


class GatherLinear(torch.autograd.Function):
    """SP all-gather (simulated: t copies of the local shard) + linear; keeps only the shard."""

    @staticmethod
    def forward(ctx, x_local, weight, t):
        ctx.t = t
        ctx.save_for_backward(x_local, weight)
        return F.linear(torch.cat([x_local] * t, dim=1), weight)

    @staticmethod
    def backward(ctx, grad):
        x_local, weight = ctx.saved_tensors
        x_full = torch.cat([x_local] * ctx.t, dim=1)  # re-gathered, as Megatron does
        grad_w = grad.flatten(0, 1).t() @ x_full.flatten(0, 1)
        grad_x = (grad @ weight).unflatten(1, (ctx.t, -1)).sum(1)  # reduce-scatter
        return grad_x, grad_w, None


class FusedRMSNorm(torch.autograd.Function):
    """TE ``rmsnorm_fwd``: keeps the 16-bit input and the fp32 1/rms, computes in fp32."""

    @staticmethod
    def forward(ctx, x, weight):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        ctx.save_for_backward(x, rstd.squeeze(-1), weight)
        return (xf * rstd * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, rstd, weight = ctx.saved_tensors
        xn, g = x.float() * rstd.unsqueeze(-1), grad.float()
        gw = g * weight.float()
        dx = rstd.unsqueeze(-1) * (gw - xn * (gw * xn).mean(-1, keepdim=True))
        return dx.to(x.dtype), (g * xn).flatten(0, -2).sum(0).to(weight.dtype)


class FusedSwiGLU(torch.autograd.Function):
    """Megatron ``bias_swiglu_impl`` (SwiGLUFunction): keeps only its input [gate, up]."""

    @staticmethod
    def forward(ctx, y):
        ctx.save_for_backward(y)
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        gate, up = y.float().chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        d_gate = grad.float() * up * sig * (1 + gate * (1 - sig))
        return torch.cat([d_gate, grad.float() * gate * sig], dim=-1).to(y.dtype)


def _rotate(x, sign=1):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-sign * x2, sign * x1], dim=-1)


class FusedRoPE(torch.autograd.Function):
    """TE fused RoPE: keeps only the fp32 frequency table [s, d] (shared by all layers)."""

    @staticmethod
    def forward(ctx, x, freqs):  # x [b, s, heads, d]
        ctx.save_for_backward(freqs)
        cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
        return (x.float() * cos + _rotate(x.float()) * sin).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (freqs,) = ctx.saved_tensors
        cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
        g = grad.float()
        return (g * cos + _rotate(g * sin, sign=-1)).to(grad.dtype), None


class Layer(torch.nn.Module):
    """One rank's share of a pre-norm layer with full softmax attention and a dense MLP."""

    def __init__(self, spec: ModelSpec, opts: ActivationOptions, dtype: torch.dtype):
        super().__init__()
        t, g, self.opts, self.spec = opts.t, spec.kv_heads, opts, spec
        self.h, self.d = spec.hidden_size, spec.head_dim_resolved
        self.f = spec.intermediate_size // t
        self.a, self.g = spec.num_attention_heads // t, g // t if g % t == 0 else 1
        self.ln, self.dropout = spec.uses_layernorm, opts.resolved_dropout(spec)
        h, qd, kd, f = self.h, self.a * self.d, self.g * self.d, self.f
        fc1 = 2 * f if spec.gated_mlp else f
        shapes = {"wq": (qd, h), "wk": (kd, h), "wv": (kd, h), "wo": (h, qd), "w1": (fc1, h)}
        shapes |= {"w2": (h, f), **({"wgate": (qd, h)} if spec.attn_output_gate else {})}
        for name, shape in shapes.items():
            self.register_parameter(name, torch.nn.Parameter(torch.randn(shape) * INIT_STD))
        self.to(dtype)
        # fused LayerNorm with fp32 weights keeps fp32 statistics, as TE/apex do
        norm_dtype = torch.float32 if self.ln and opts.fused_norm else dtype
        for name, width in [("n1", self.h), ("n2", self.h), ("nq", self.d), ("nk", self.d)]:
            w = torch.ones(width, dtype=norm_dtype)
            self.register_parameter(name, torch.nn.Parameter(w))
            if self.ln:
                self.register_parameter(f"{name}_b", torch.nn.Parameter(torch.zeros_like(w)))

    def norm(self, x, name):
        w, fused = getattr(self, name), self.opts.fused_norm
        if self.ln and fused:
            return F.layer_norm(x, (x.shape[-1],), w, getattr(self, f"{name}_b"), EPS).to(x.dtype)
        if fused:
            return FusedRMSNorm.apply(x, w)
        xf = x.float()  # Hugging Face LlamaRMSNorm / an unfused LayerNorm, in fp32
        if self.ln:
            xf = xf - xf.mean(-1, keepdim=True)
        xn = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)
        out = w * xn
        return out + getattr(self, f"{name}_b") if self.ln else out

    def col(self, x, weight):
        """Column-parallel linear; with SP the input is the local shard, gathered inside."""
        sp = self.opts.sp()
        return GatherLinear.apply(x, weight, self.opts.t) if sp else F.linear(x, weight)

    def row(self, x, weight):
        """Row-parallel linear; with SP the reduce-scatter leaves this rank's token slice."""
        y = F.linear(x, weight)
        return y[:, : y.shape[1] // self.opts.t] if self.opts.sp() else y

    def drop(self, x):
        return torch.native_dropout(x, DROPOUT_P, True)[0] if self.dropout else x

    def core(self, q, k, v):  # q [b, a, s, d]; k, v [b, g, s, d]
        kernel = self.opts.attention
        if kernel is AttentionKernel.eager:
            return self.eager(q, k, v)
        math_kernel = kernel is AttentionKernel.sdpa_math
        p = DROPOUT_P if self.dropout else 0.0
        with sdpa_kernel(SDPBackend.MATH if math_kernel else SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, None, p, True, enable_gqa=True)

    def eager(self, q, k, v):
        if self.g != self.a:
            k, v = (x.repeat_interleave(self.a // self.g, dim=1) for x in (k, v))
        mask = torch.full((q.shape[2],) * 2, float("-inf")).triu(1)
        scores = torch.matmul(q, k.transpose(-1, -2))
        if self.opts.softmax_dtype is SoftmaxDtype.fp32:
            probs = torch.softmax(scores.float() / self.d**0.5 + mask, -1).to(q.dtype)
        else:
            probs = torch.softmax(scores / self.d**0.5 + mask.to(q.dtype), -1)
        return torch.matmul(self.drop(probs), v)

    def attention(self, x, freqs):
        b, s = x.shape[0], x.shape[1] * (self.opts.t if self.opts.sp() else 1)
        q, k, v = (self.col(x, w).unflatten(-1, (-1, self.d)) for w in (self.wq, self.wk, self.wv))
        if self.spec.uses_qk_norm:
            q, k = self.norm(q, "nq"), self.norm(k, "nk")
        if freqs is not None:
            q, k = FusedRoPE.apply(q, freqs), FusedRoPE.apply(k, freqs)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))  # [b, heads, s, d] views
        if self.opts.recompute is Recompute.selective:
            o = checkpoint(self.core, q, k, v, use_reentrant=True)
        else:
            o = self.core(q, k, v)
        o = o.transpose(1, 2).reshape(b, s, self.a * self.d)
        if self.spec.attn_output_gate:
            o = o * torch.sigmoid(self.col(x, self.wgate))
        return self.drop(self.row(o, self.wo))

    def mlp(self, x):
        y = self.col(x, self.w1)
        if not self.spec.gated_mlp:
            y = F.gelu(y)
        elif self.opts.fused_swiglu:
            y = FusedSwiGLU.apply(y)
        else:
            gate, up = y.chunk(2, dim=-1)
            y = F.silu(gate) * up
        return self.drop(self.row(y, self.w2))

    def body(self, x, freqs=None):
        x = x + self.attention(self.norm(x, "n1"), freqs)
        return x + self.mlp(self.norm(x, "n2"))

    def forward(self, x, freqs=None):
        if self.opts.recompute is Recompute.full:
            args = (x,) if freqs is None else (x, freqs)
            return checkpoint(self.body, *args, use_reentrant=True)
        return self.body(x, freqs)


class Head(Layer):
    """One rank's loss head after the last layer (Megatron-Core GPTModel): the final norm, then
    the output layer's V/t vocabulary columns, column-parallel (with SP the local shard is
    gathered inside and kept). The final norm has the input norm's width and dtype, so it
    reuses that weight; the layer's other weights are parameters, never saved tensors."""

    def __init__(self, spec: ModelSpec, opts: ActivationOptions, dtype: torch.dtype):
        super().__init__(spec, opts, dtype)
        w = torch.randn(spec.vocab_size // opts.t, spec.hidden_size) * INIT_STD
        self.register_parameter("wout", torch.nn.Parameter(w.to(dtype)))

    def forward(self, x, freqs=None):
        return self.col(self.norm(x, "n1"), self.wout)


class MtpInput(Layer):
    """One rank's MTP module up to its transformer layer (Megatron-Core
    ``MultiTokenPredictionLayer._concat_embeddings``): enorm over the shifted tokens'
    embeddings, hnorm over the hidden states, both [b, s (s/t with SP), h], concatenated and
    projected by the column-parallel eh_proj (2h -> h/t). The two norms have the layer's norm
    widths and dtype, so they reuse its two norm weights."""

    def __init__(self, spec: ModelSpec, opts: ActivationOptions, dtype: torch.dtype):
        super().__init__(spec, opts, dtype)
        w = torch.randn(spec.hidden_size // opts.t, 2 * spec.hidden_size) * INIT_STD
        self.register_parameter("weh", torch.nn.Parameter(w.to(dtype)))

    def forward(self, embedded, hidden):
        both = torch.cat((self.norm(embedded, "n1"), self.norm(hidden, "n2")), dim=-1)
        return self.col(both, self.weh)


def _dtype(options: ActivationOptions) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(options.dtype.value, torch.float32)


def _input(spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions):
    """One rank's layer input [b, s (s/t with SP), h], requiring grad."""
    tokens = seq // options.t if options.sp() else seq
    return torch.randn(
        micro_batch, tokens, spec.hidden_size, dtype=_dtype(options), requires_grad=True
    )


def measure_head(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions, seed: int = 0
) -> dict:
    """``measure_layer`` for the loss head (``Head``): what the final norm and the output
    layer save; the logits the loss keeps are not saved tensors of these two."""
    if options.cp > 1:
        raise ValueError("measured heads: cp = 1")
    torch.manual_seed(seed)
    head = Head(spec, options, _dtype(options))
    return _saved(head, _input(spec, seq, micro_batch, options))


def measure_mtp_input(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions, seed: int = 0
) -> dict:
    """``measure_layer`` for an MTP module's input side (``MtpInput``): its two norms and
    eh_proj; the embedding lookup keeps only token ids, which are not counted."""
    if options.cp > 1:
        raise ValueError("measured MTP inputs: cp = 1")
    torch.manual_seed(seed)
    module = MtpInput(spec, options, _dtype(options))
    embedded, hidden = (_input(spec, seq, micro_batch, options) for _ in range(2))
    return _saved(module, embedded, hidden)


def measure_layer(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions, seed: int = 0
) -> dict:
    """``{"bytes", "tensors": [(shape, dtype, storage bytes)]}`` saved by one layer + RoPE table.

    Runs backward afterwards to prove the graph is whole; ValueError for what it cannot measure."""
    if options.cp > 1 or spec.is_mla or spec.is_moe or spec.linear_attention_layers:
        raise ValueError("measured layers: full attention + dense MLP, cp = 1")
    if options.resolved_dropout(spec) and options.attention is AttentionKernel.flash:
        raise ValueError("flash attention with dropout is not measured (CPU falls back to math)")
    torch.manual_seed(seed)
    layer = Layer(spec, options, _dtype(options))
    x = _input(spec, seq, micro_batch, options)
    freqs, width = None, rope_dim(spec)
    if width:  # [s, d] fp32, as TE keeps it
        angles = torch.outer(torch.arange(seq).float(), 1e-4 ** (torch.arange(0, width, 2) / width))
        freqs = torch.cat([angles, angles], dim=-1)
    return _saved(layer, x, freqs)


def _saved(module: torch.nn.Module, *inputs) -> dict:
    """Every tensor ``module`` saves for backward in one forward of ``inputs`` (its storage
    once, parameters left out), then backward to prove the graph is whole."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, tuple] = {}

    def pack(tensor):
        st = tensor.untyped_storage()
        if st.data_ptr() not in params:
            seen.setdefault(st.data_ptr(), (tuple(tensor.shape), str(tensor.dtype), st.nbytes()))
        return tensor

    with saved_tensors_hooks(pack, lambda tensor: tensor):
        out = module(*inputs)
    out.float().square().mean().backward()
    return {"bytes": sum(n for *_, n in seen.values()), "tensors": list(seen.values())}


def _demo() -> list[tuple[str, ModelSpec, list[AttentionKernel]]]:
    base = {"vocab_size": 128, "num_hidden_layers": 1, "tpcalc": {"name": "tiny", "seq_length": 64}}
    gpt = ModelSpec(model_type="gpt2", hidden_size=64, intermediate_size=256,
                    num_attention_heads=4, hidden_act="gelu", **base)  # fmt: skip
    llama = ModelSpec(model_type="llama", hidden_size=64, intermediate_size=160,
                      num_attention_heads=8, num_key_value_heads=2, **base)  # fmt: skip
    return [("gpt3-style", gpt, [AttentionKernel.eager]), ("llama", llama, list(AttentionKernel))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="built-in name or YAML/config.json (default: a tiny grid)")
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=2)
    opt_help = "an ActivationOptions field, e.g. --opt t=2 --opt attention=eager"
    parser.add_argument("--opt", action="append", default=[], metavar="FIELD=VALUE", help=opt_help)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    if args.model:
        from tpcalc.catalog import load_model

        fields = dict(o.split("=", 1) for o in args.opt)
        cases = [(args.model, load_model(args.model), fields)]
    else:
        cases = [(name, spec, {"attention": k, "t": t, "recompute": r})
                 for name, spec, kernels in _demo() for k in kernels
                 for t in (1, 2) for r in Recompute]  # fmt: skip
    seq, b = args.seq, args.micro_batch
    for name, spec, fields in cases:
        opts = ActivationOptions(**fields)
        got = measure_layer(spec, seq, b, opts)["bytes"]
        model = sum(r.bytes for r in saved_tensors(spec, 0, seq, b, opts))
        model += sum(r.bytes for r in shared_tensors(spec, seq, b, opts))
        row = {"layer": name, **opts.echo(spec), "measured_bytes": got, "model_bytes": model,
               "error": model / got - 1}  # fmt: skip
        print(json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
