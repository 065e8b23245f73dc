"""The exact activation model against what PyTorch's autograd really saves (CPU, BF16).

``tools/measure_activations.py`` builds one rank's layer and adds up the storages of every
tensor saved for backward (saved_tensors_hooks, de-duplicated by storage, parameters excluded).
Every shape must agree with ``saved_tensors`` + ``shared_tensors`` within 1%.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tpcalc.calc.activations.exact.layer import (  # noqa: E402
    head_tensors,
    mtp_input_tensors,
    recompute_working_bytes,
    saved_tensors,
    shared_tensors,
)
from tpcalc.calc.activations.exact.options import ActivationOptions  # noqa: E402
from tpcalc.catalog import load_model  # noqa: E402
from tpcalc.specs import ModelSpec  # noqa: E402

TOOL = Path(__file__).resolve().parents[1] / "tools" / "measure_activations.py"
TOLERANCE = 0.01  # the bar: within 1% on every shape


def _tool():
    spec = importlib.util.spec_from_file_location("measure_activations", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec(model_type: str, **fields) -> ModelSpec:
    base = {"vocab_size": 128, "num_hidden_layers": 1, "tpcalc": {"name": "t", "seq_length": 64}}
    return ModelSpec(model_type=model_type, **{**base, **fields})


# GPT-3 style: LayerNorm, MHA, GeLU 4h, dropout on (resolved default), learned positions.
GPT = _spec("gpt2", hidden_size=64, intermediate_size=256, num_attention_heads=4, hidden_act="gelu")
GPT6 = _spec(
    "gpt2", hidden_size=96, intermediate_size=384, num_attention_heads=6, hidden_act="gelu"
)
# Llama style: RMSNorm, GQA, RoPE, SwiGLU, no dropout.
LLAMA = _spec("llama", hidden_size=64, intermediate_size=160, num_attention_heads=8,
              num_key_value_heads=2)  # fmt: skip
LLAMA_MHA = _spec("llama", hidden_size=64, intermediate_size=128, num_attention_heads=4)
LLAMA_WIDE = _spec("llama", hidden_size=128, intermediate_size=352, num_attention_heads=8,
                   num_key_value_heads=4, head_dim=16)  # fmt: skip
# Qwen3.5 full-attention layer: q/k RMSNorm per head and a sigmoid output gate.
QWEN = _spec("qwen3", hidden_size=64, intermediate_size=160, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, attn_output_gate=True)  # fmt: skip

# Real layer widths at a short sequence, one rank of t = 8 (the Qwen3.8 full-attention layer:
# 24 heads / 8, its 4 KV heads replicated to one per rank, gate and q/k norm).
LLAMA_70B, LLAMA_8B = load_model("llama3-70b"), load_model("llama3-8b")
QWEN38_FULL = load_model("qwen3.8").model_copy(update={"layer_types": None})

CASES = [
    # id, spec, seq, micro-batch, options
    ("gpt-t1", GPT, 64, 2, {"attention": "eager"}),
    ("gpt-t2-sp", GPT, 64, 2, {"attention": "eager", "t": 2}),
    ("gpt-t2-nosp", GPT, 64, 2, {"attention": "eager", "t": 2, "sequence_parallel": False}),
    ("gpt-t4-sp-selective", GPT, 64, 1, {"attention": "eager", "t": 4, "recompute": "selective"}),
    ("gpt-t1-full", GPT, 64, 2, {"attention": "eager", "recompute": "full"}),
    ("gpt-t2-sp-full", GPT, 64, 2, {"attention": "eager", "t": 2, "recompute": "full"}),
    ("gpt6-t3-sp", GPT6, 48, 1, {"attention": "eager", "t": 3}),
    ("gpt-fp32-softmax", GPT, 32, 2,
     {"attention": "eager", "softmax_dtype": "fp32", "t": 2, "sequence_parallel": False}),
    ("gpt-flash-nodrop", GPT, 64, 2, {"dropout": False, "t": 2}),
    ("gpt-unfused-norm", GPT, 64, 2, {"attention": "eager", "t": 2, "fused_norm": False}),
    ("llama-flash-t1", LLAMA, 64, 2, {}),
    ("llama-flash-t2-sp", LLAMA, 64, 2, {"t": 2}),
    ("llama-flash-t2-nosp", LLAMA, 64, 2, {"t": 2, "sequence_parallel": False}),
    ("llama-flash-t4-kv-replicated", LLAMA, 64, 1, {"t": 4, "recompute": "selective"}),
    ("llama-flash-t2-full", LLAMA, 64, 2, {"t": 2, "recompute": "full"}),
    ("llama-eager-t1", LLAMA, 64, 2, {"attention": "eager"}),
    ("llama-eager-fp32-t2", LLAMA, 64, 2, {"attention": "eager", "softmax_dtype": "fp32", "t": 2}),
    ("llama-eager-selective", LLAMA, 64, 2,
     {"attention": "eager", "t": 2, "recompute": "selective"}),
    ("llama-math-t1", LLAMA, 64, 2, {"attention": "sdpa-math"}),
    ("llama-math-t2-sp", LLAMA, 64, 2, {"attention": "sdpa-math", "t": 2}),
    ("llama-math-dropout", LLAMA, 32, 2, {"attention": "sdpa-math", "dropout": True}),
    ("llama-unfused", LLAMA, 64, 2, {"t": 2, "fused_norm": False, "fused_swiglu": False}),
    ("llama-mha-t2", LLAMA_MHA, 48, 2, {"t": 2}),
    ("llama-wide-eager-t4", LLAMA_WIDE, 96, 3,
     {"attention": "eager", "softmax_dtype": "fp32", "t": 4}),
    ("qwen-flash-t1", QWEN, 64, 2, {}),
    ("qwen-flash-t2-sp", QWEN, 64, 2, {"t": 2}),
    ("qwen-eager-selective", QWEN, 64, 2, {"attention": "eager", "t": 2, "recompute": "selective"}),
    ("qwen-unfused-nosp", QWEN, 64, 2, {"t": 2, "fused_norm": False, "sequence_parallel": False}),
    ("qwen-full", QWEN, 64, 2, {"t": 2, "recompute": "full"}),
    ("llama3-70b-layer-t8", LLAMA_70B, 256, 1, {"t": 8}),
    ("llama3-8b-layer-t8-eager-selective", LLAMA_8B, 512, 1,
     {"t": 8, "attention": "eager", "recompute": "selective"}),
    ("qwen3.8-full-attention-layer-t8", QWEN38_FULL, 256, 1, {"t": 8}),
]  # fmt: skip


@pytest.fixture(scope="module")
def tool():
    return _tool()


@pytest.mark.parametrize(
    ("spec", "seq", "b", "opts"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_model_matches_autograd(tool, spec, seq, b, opts):
    options = ActivationOptions(**opts)
    measured = tool.measure_layer(spec, seq, b, options)["bytes"]
    records = saved_tensors(spec, 0, seq, b, options) + shared_tensors(spec, seq, b, options)
    modelled = sum(r.bytes for r in records)
    assert abs(modelled / measured - 1) <= TOLERANCE, (modelled, measured)


@pytest.mark.parametrize(
    ("spec", "seq", "b", "opts", "rope_width"),
    [(LLAMA_WIDE, 96, 3, {"t": 4}, 16), (GPT, 64, 2, {"attention": "eager", "t": 2}, 0),
     (LLAMA, 64, 2, {"t": 2, "sequence_parallel": False}, 8)],
    ids=["llama-wide-t4-sp", "gpt-t2-sp-eager", "llama-t2-nosp"],
)  # fmt: skip
def test_full_recompute_rebuilds_what_autograd_saves_less_the_input(tool, spec, seq, b, opts,
                                                                    rope_width):  # fmt: skip
    """Full recompute re-runs a layer's forward in backward (Megatron-Core CheckpointFunction),
    so what it holds again is what autograd saves for the plain layer (measured here), less the
    checkpoint's input, one 16-bit [s/t with SP, b, h] tensor (the same storage, detached), and
    less the RoPE table all layers share (fp32 [s, d_rope], kept once)."""
    plain = ActivationOptions(**opts)
    measured = tool.measure_layer(spec, seq, b, plain)["bytes"]
    tokens = seq // plain.t if plain.sp() else seq
    rebuilt = measured - tokens * b * spec.hidden_size * 2 - seq * rope_width * 4
    full = ActivationOptions(**{**opts, "recompute": "full"})
    working = recompute_working_bytes(spec, 0, seq, b, full)
    assert abs(working / rebuilt - 1) <= TOLERANCE, (working, rebuilt)


@pytest.mark.parametrize(
    ("spec", "opts"),
    [(LLAMA, {}), (LLAMA, {"t": 2}), (LLAMA, {"t": 2, "sequence_parallel": False}),
     (LLAMA, {"fused_norm": False}), (GPT, {"t": 2}), (LLAMA_WIDE, {"t": 4})],
    ids=["llama-t1", "llama-t2-sp", "llama-t2-nosp", "llama-unfused", "gpt-t2-sp", "wide-t4"],
)  # fmt: skip
def test_last_stage_extras_match_autograd(tool, spec, opts):
    """The last stage's final norm and output layer (``head_tensors``) and an MTP module's
    input side (``mtp_input_tensors``) against what autograd saves for them."""
    options = ActivationOptions(**opts)
    for measure, model in ((tool.measure_head, head_tensors),
                           (tool.measure_mtp_input, mtp_input_tensors)):  # fmt: skip
        measured = measure(spec, 64, 2, options)["bytes"]
        modelled = sum(r.bytes for r in model(spec, 64, 2, options))
        assert abs(modelled / measured - 1) <= TOLERANCE, (model.__name__, modelled, measured)


def test_enough_shapes_and_every_mode_is_covered():
    assert len(CASES) >= 20
    opts = [ActivationOptions(**c[4]) for c in CASES]
    assert {o.recompute.value for o in opts} == {"none", "selective", "full"}
    assert {o.attention.value for o in opts} == {"flash", "eager", "sdpa-math"}
    assert {(o.t > 1, o.sp()) for o in opts} == {(False, False), (True, True), (True, False)}


def test_kernels_really_differ(tool):
    """The measurement is sensitive: eager keeps the s x s probabilities, flash does not."""
    eager = tool.measure_layer(LLAMA, 64, 1, ActivationOptions(attention="eager"))["bytes"]
    flash = tool.measure_layer(LLAMA, 64, 1, ActivationOptions())["bytes"]
    probs_bytes = LLAMA.num_attention_heads * 64 * 64 * 2  # [b, a, s, s] bf16, b = 1
    assert eager - flash >= probs_bytes


def test_unmeasurable_combinations_say_so(tool):
    with pytest.raises(ValueError, match="dropout"):
        tool.measure_layer(GPT, 64, 1, ActivationOptions(attention="flash"))
    with pytest.raises(ValueError, match="cp = 1"):
        tool.measure_layer(LLAMA, 64, 1, ActivationOptions(cp=2))


def test_custom_kernels_have_correct_gradients(tool):
    """The autograd Functions that mimic GPU kernels compute true gradients.

    Norm and RoPE compute in fp32 inside (as the kernels do), so finite differences use a
    coarser step and tolerance than gradcheck's float64 defaults."""
    from functools import partial

    from torch.autograd import gradcheck as exact

    gradcheck = partial(exact, eps=1e-3, atol=1e-3, rtol=1e-3)

    d = {"dtype": torch.float64, "requires_grad": True}
    x, w = torch.randn(2, 3, 8, **d), torch.randn(8, **d)
    assert gradcheck(tool.FusedRMSNorm.apply, (x, w))
    assert gradcheck(tool.FusedSwiGLU.apply, (torch.randn(2, 3, 8, **d),))
    freqs = torch.randn(3, 8, dtype=torch.float64)
    assert gradcheck(tool.FusedRoPE.apply, (torch.randn(2, 3, 2, 8, **d), freqs))
    assert gradcheck(tool.GatherLinear.apply, (x, torch.randn(5, 8, **d), 2))
