"""The exact activation model: Korthikanti's formula as a special case, properties, golden values.

Restricted to the tensors Table 2 counts, a GPT-3 layer (LayerNorm, MHA, GeLU 4h, dropout, eager
attention, fused norm, bf16 softmax) must give exactly sbh(34 + 5as/h), sbh(10 + 24/t + 5as/(ht))
and sbh/t(34 + 5as/h); everything else it saves is a named small term.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpcalc.calc.activations.exact.layer import (
    head_tensors,
    layer_kind,
    mtp_input_tensors,
    recompute_working_bytes,
    saved_tensors,
    shared_tensors,
)
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.summary_explain import exact_activation_terms, tensor_terms
from tpcalc.calc.activations.paper import paper_layer
from tpcalc.calc.activations.paper_explain import layer_terms
from tpcalc.catalog import load_model, model_names
from tpcalc.choices import Recompute
from tpcalc.errors import DivisibilityError, InputError
from tpcalc.specs import ModelSpec
from tpcalc.terms import Row

GPT_OPTIONS = {"attention": "eager", "dropout": True, "fused_norm": True, "softmax_dtype": "bf16"}


def gpt(h: int, a: int) -> ModelSpec:
    return ModelSpec(
        model_type="gpt2", hidden_size=h, intermediate_size=4 * h, num_attention_heads=a,
        hidden_act="gelu", vocab_size=50257, num_hidden_layers=2,
        tpcalc={"name": "gpt3-style", "seq_length": 2048},
    )  # fmt: skip


def layer_bytes(spec, s, b, *, paper_only=False, **opts) -> int:
    records = saved_tensors(spec, 0, s, b, ActivationOptions(**opts))
    return sum(r.bytes for r in records if r.in_paper or not paper_only)


def total(spec, s, b, **opts) -> int:
    terms = exact_activation_terms(spec, s, b, ActivationOptions(**opts))
    return next(t.value for t in terms if t.key == "exact_activation_bytes")


# ---- requirement 2: Korthikanti et al. 2022 Table 2, algebraically, for many shapes ----
gpt_shapes = st.tuples(
    st.sampled_from([1, 2, 4, 8, 16, 32, 96]),  # heads a
    st.sampled_from([8, 64, 128]),  # head dim
    st.integers(1, 64).map(lambda k: 64 * k),  # s
    st.integers(1, 4),  # b
    st.sampled_from([1, 2, 4, 8]),  # t
)


@settings(max_examples=150, deadline=None)
@given(gpt_shapes)
def test_gpt3_layer_restricted_to_paper_tensors_is_table_2(shape):
    a, d, s, b, t = shape
    t = t if a % t == 0 else 1
    h = a * d
    spec = gpt(h, a)
    sbh, scores = s * b * h, 5 * a * s * s * b
    # Table 2, no parallelism: sbh(34 + 5as/h)
    assert layer_bytes(spec, s, b, paper_only=True, **GPT_OPTIONS) == 34 * sbh + scores
    # Table 2, tensor parallel: sbh(10 + 24/t + 5as/(ht))
    tp = layer_bytes(spec, s, b, paper_only=True, t=t, sequence_parallel=False, **GPT_OPTIONS)
    assert tp == 10 * sbh + (24 * sbh + scores) // t
    # Table 2, tensor + sequence parallel: sbh/t(34 + 5as/h)
    sp = layer_bytes(spec, s, b, paper_only=True, t=t, **GPT_OPTIONS)
    assert sp * t == 34 * sbh + scores
    # Table 2, selective recompute: the 5as/h term goes; full recompute keeps 2sbh (/t with SP)
    sel = layer_bytes(spec, s, b, paper_only=True, t=t, recompute="selective", **GPT_OPTIONS)
    assert sel * t == 34 * sbh
    full = layer_bytes(spec, s, b, t=t, sequence_parallel=False, recompute="full", **GPT_OPTIONS)
    assert full == 2 * sbh


@pytest.mark.parametrize(("h", "a", "s", "t", "sp", "recompute"), [
    (12288, 96, 2048, 8, True, "none"),  # GPT-3 175B, Korthikanti Table 3
    (12288, 96, 2048, 8, False, "none"),
    (20480, 128, 2048, 8, True, "selective"),  # MT-NLG 530B
    (6144, 64, 2048, 8, False, "selective"),  # 22B
])  # fmt: skip
def test_paper_tensors_equal_the_leads_table_2_implementation(h, a, s, t, sp, recompute):
    spec = gpt(h, a)
    paper = layer_terms(
        paper_layer(spec, seq=s, micro_batch=1, t=t, sp=sp, recompute=Recompute(recompute))
    )
    exact = layer_bytes(spec, s, 1, paper_only=True, t=t, sequence_parallel=sp,
                        recompute=recompute, **GPT_OPTIONS)  # fmt: skip
    assert exact == paper[-1].value


def test_what_the_formula_leaves_out_is_named_and_small():
    """GPT-3 175B layer: outside Table 2 are only the two LayerNorms' fp32 mean and 1/sigma."""
    spec, s, b, t = gpt(12288, 96), 2048, 1, 8
    records = saved_tensors(spec, 0, s, b, ActivationOptions(t=t, **GPT_OPTIONS))
    extra = [r for r in records if not r.in_paper]
    assert {r.name for r in extra} == {
        "input_norm.mean", "input_norm.rstd", "post_attention_norm.mean", "post_attention_norm.rstd"
    }  # fmt: skip
    assert sum(r.bytes for r in extra) == 2 * 2 * 4 * (s // t) * b  # 2 norms x 2 stats x fp32
    # with flash attention (no dropout) the softmax statistics are the new small term
    flash = saved_tensors(spec, 0, s, b, ActivationOptions(t=t, dropout=False))
    lse = next(r for r in flash if r.name == "attention.softmax_lse")
    assert lse.bytes == 4 * b * (96 // t) * s and not lse.in_paper


# ---- options change exactly what they should ----
LLAMA = ModelSpec(
    model_type="llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
    num_key_value_heads=8, vocab_size=128256, num_hidden_layers=2,
    tpcalc={"name": "llama-like", "seq_length": 8192},
)  # fmt: skip


def test_softmax_in_fp32_costs_two_or_four_bytes_per_score():
    spec, s, b, a = gpt(1024, 16), 512, 2, 16
    drop = dict(GPT_OPTIONS)
    fp32 = layer_bytes(spec, s, b, **{**drop, "softmax_dtype": "fp32"})
    assert fp32 - layer_bytes(spec, s, b, **drop) == 2 * a * s * s * b  # fp32 probs, 4 vs 2 B
    nodrop = {**drop, "dropout": False}
    fp32 = layer_bytes(spec, s, b, **{**nodrop, "softmax_dtype": "fp32"})
    assert fp32 - layer_bytes(spec, s, b, **nodrop) == 4 * a * s * s * b  # + bf16 copy for P·V


def test_unfused_norm_and_swiglu_cost_what_they_keep():
    s, b, t, h, f = 4096, 1, 4, 4096, 14336
    fused = layer_bytes(LLAMA, s, b, t=t)
    # HF RMSNorm keeps an fp32 copy (4h) and the normalised bf16 (2h) instead of the input (2h)
    assert layer_bytes(LLAMA, s, b, t=t, fused_norm=False) - fused == 2 * 4 * h * (s // t) * b
    # unfused SwiGLU also keeps silu(gate), [s, b, f/t] bf16
    assert layer_bytes(LLAMA, s, b, t=t, fused_swiglu=False) - fused == 2 * s * b * f // t


def test_context_parallel_halves_every_token_tensor():
    assert total(LLAMA, 8192, 1, t=4, cp=2) * 2 == total(LLAMA, 8192, 1, t=4)


@pytest.mark.parametrize("name", model_names())
def test_per_rank_bytes_never_grow_with_t_sp_or_recompute(name):
    spec = load_model(name)
    s = 4096
    by_t = [total(spec, s, 1, t=t) for t in (1, 2, 4, 8)]
    assert by_t == sorted(by_t, reverse=True)
    assert total(spec, s, 1, t=8) <= total(spec, s, 1, t=8, sequence_parallel=False)
    modes = [total(spec, s, 1, t=8, recompute=r) for r in ("none", "selective", "full")]
    assert modes == sorted(modes, reverse=True)


@pytest.mark.parametrize("name", model_names())
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_breakdowns_add_up(name, recompute):
    spec = load_model(name)
    opts = ActivationOptions(t=8, recompute=recompute)
    row = Row(inputs=opts.echo(spec), terms=exact_activation_terms(spec, 4096, 1, opts))
    assert row.check_breakdowns() == []


# ---- golden values, derived by hand ----
def test_llama3_70b_t8_sp_flash_golden():
    """Llama 3 70B, s=8192, b=1, t=8, SP, flash, no recompute (hand count per token, bytes):
    SP region (s/t = 1024 tokens): 2 norms x (2h input + 4 rstd) + QKV input 2h + fc1 input 2h
      = 8h + 8 = 65,544;
    TP region (8192 tokens): q 2·8·128 = 2048, k 2·1·128 = 256, v 256, O 2048, LSE 4·8 = 32,
      fc1 out 2·2·3584 = 14,336, fc2 in 2·3584 = 7,168 -> 26,144;
    per layer 1024·65,544 + 8192·26,144 = 281,288,704; 80 layers + RoPE table 8192·128·4."""
    spec = load_model("llama3-70b")
    assert total(spec, 8192, 1, t=8) == 80 * 281_288_704 + 8192 * 128 * 4


# ---- what a recompute rebuilds in backward, derived by hand ----
def test_recompute_working_set_llama3_70b_t8_sp_flash_golden():
    """Llama 3 70B, s=8192, b=1, t=8, SP, flash (counts of the golden test above):
    full: the layer's 281,288,704 bytes less its kept input, 1024 tokens · 2h = 16,777,216;
    selective: FlashAttention's LSE, fp32 [b, a/t, s] = 8 · 8192 · 4 = 262,144 (q, k, v and O
    stay); layernorm: one norm's output at a time, 1024 tokens · 2h = 16,777,216 (the two norms
    are rebuilt one after the other); moe_act drops nothing in a dense layer; none: 0."""
    spec = load_model("llama3-70b")

    def working(**opts):
        return recompute_working_bytes(spec, 0, 8192, 1, ActivationOptions(t=8, **opts))

    assert working(recompute="full") == 281_288_704 - 1024 * 2 * 8192
    assert working(recompute="selective") == 8 * 8192 * 4
    assert working(recompute="selective", recompute_modules=("layernorm", "moe_act")) == (
        1024 * 2 * 8192
    )
    assert working(recompute="none") == 0


@pytest.mark.parametrize("name", ["llama3-8b", "deepseek-v3", "qwen3.8", "gpt3-175b"])
@pytest.mark.parametrize(
    "opts",
    [{"recompute": "full"}, {"recompute": "selective"},
     {"recompute": "selective", "recompute_modules": ("layernorm", "mlp", "moe")}],
)  # fmt: skip
def test_a_recompute_never_rebuilds_more_than_the_plain_layer_saves(name, opts):
    """What a recompute holds again in backward is part of what it drops from the layer's
    saved tensors (all of it for full and selective, the largest site for modules), and it
    rebuilds something whenever it drops something (every layer kind of the model)."""
    spec = load_model(name)
    options = ActivationOptions(t=2, **opts)
    plain = ActivationOptions(t=2)
    for kind in dict.fromkeys(layer_kind(spec, i) for i in range(spec.num_hidden_layers)):
        i = next(j for j in range(spec.num_hidden_layers) if layer_kind(spec, j) == kind)
        whole = sum(r.bytes for r in saved_tensors(spec, i, 1024, 2, plain))
        kept = sum(r.bytes for r in saved_tensors(spec, i, 1024, 2, options))
        working = recompute_working_bytes(spec, i, 1024, 2, options)
        assert 0 <= working <= whole - kept, (kind, working)
        assert (working > 0) == (kept < whole), kind


@pytest.mark.parametrize(
    ("t", "sp", "divisor"), [(1, False, 1), (8, True, 8), (8, False, 1)]
)  # fmt: skip
def test_last_stage_extras_by_hand(t, sp, divisor):
    # DeepSeek-V3 (h = 7168, RMSNorm), s = 4096, b = 1, BF16, TE's fused norm (input + FP32
    # 1/rms per token). Loss head: final norm input and 1/rms, output layer input (2sbh + 4sb
    # + 2sbh). MTP input side: enorm and hnorm (input and 1/rms each), eh_proj's [s, b, 2h]
    # input (2·(2sbh + 4sb) + 2·s·b·2h). SP keeps the s/t shard of every one; without SP
    # every TP rank keeps all s tokens.
    spec, s, h = load_model("deepseek-v3"), 4096, 7168
    opts = ActivationOptions(t=t, sequence_parallel=sp)
    head = sum(r.bytes for r in head_tensors(spec, s, 1, opts))
    mtp = sum(r.bytes for r in mtp_input_tensors(spec, s, 1, opts))
    assert head == (2 * s * h + 4 * s + 2 * s * h) // divisor
    assert mtp == (2 * (2 * s * h + 4 * s) + 2 * s * 2 * h) // divisor


@pytest.mark.parametrize("fp8", ["fp8_linear_inputs", "fp8_cache"])
def test_mtp_projection_keeps_its_input_in_fp8_in_an_fp8_run(fp8):
    # Megatron-LM multi_token_prediction.py runs _concat_embeddings (eh_proj, a TE column-
    # parallel linear) under the run's FP8 context, so TE keeps its quantized input; DeepSeek-V3's
    # FP8 caching keeps every Linear's input in FP8. DeepSeek-V3, s = 4096, b = 1, TP1: eh_proj's
    # [s, b, 2h] input at one byte (58.7 MB, from 117.4 MB); the norms' inputs and statistics
    # and the loss head (Megatron's own output layer) are as in BF16.
    spec, s, h = load_model("deepseek-v3"), 4096, 7168
    plain, opts = ActivationOptions(), ActivationOptions(**{fp8: True})
    mtp = {r.name: r for r in mtp_input_tensors(spec, s, 1, opts)}
    assert mtp["mtp.eh_proj.input"].bytes == s * 2 * h * 1 == 58_720_256
    assert sum(r.bytes for r in mtp.values()) == 2 * (2 * s * h + 4 * s) + s * 2 * h
    assert sum(r.bytes for r in head_tensors(spec, s, 1, opts)) == sum(
        r.bytes for r in head_tensors(spec, s, 1, plain)
    )


def test_layer_kinds_follow_the_config():
    qwen = load_model("qwen3.8")
    kinds = [layer_kind(qwen, i) for i in range(qwen.num_hidden_layers)]
    assert kinds.count("linear_attention+dense") == 48 and kinds.count("attention+dense") == 16
    ds = load_model("deepseek-v3")
    assert [layer_kind(ds, i) for i in (0, 2, 3, 60)] == ["mla+dense"] * 2 + ["mla+moe"] * 2


# ---- defaults, inputs, errors ----
def test_defaults_are_the_megatron_te_h100_ones():
    opts = ActivationOptions()
    assert (opts.attention.value, opts.fused_norm, opts.fused_swiglu, opts.recompute.value) == (
        "flash", True, True, "none")  # fmt: skip
    assert opts.resolved_dropout(LLAMA) is False and opts.resolved_dropout(gpt(64, 4)) is True
    with pytest.raises(TypeError, match="flash"):  # an unknown option is refused
        ActivationOptions(flash=True)
    with pytest.raises(InputError, match="t=0 must be a positive integer"):
        ActivationOptions(t=0)


def test_a_config_that_states_its_dropout_is_taken_at_its_word():
    # Nemotron trains without dropout (NeMo NemotronConfig hidden_dropout = attention_dropout =
    # 0.0; the NeMo 24.07 launcher configs also set ffn_dropout 0.0), though tpcalc's rule would
    # keep masks for its LayerNorm, non-gated MLP; GPT-3's launcher configs train with 0.1 and
    # state nothing, so the rule keeps its masks. An explicit option wins over both.
    opts = ActivationOptions()
    for name in ("nemotron3-8b", "nemotron3-22b", "nemotron4-15b", "nemotron4-340b"):
        spec = load_model(name)
        assert spec.uses_layernorm and not spec.gated_mlp  # the rule alone would say on
        assert spec.tpcalc.dropout is False and "hidden_dropout 0.0" in spec.tpcalc.dropout_source
        assert opts.resolved_dropout(spec) is False
        assert ActivationOptions(dropout=True).resolved_dropout(spec) is True
    gpt3 = load_model("gpt3-175b")
    assert gpt3.tpcalc.dropout is None and opts.resolved_dropout(gpt3) is True
    # ``tpcalc show`` says so, with the source
    from tpcalc.reports.models import show_report

    notes = show_report("nemotron4-340b").notes
    assert any(n.startswith("dropout off by default: NVIDIA/NeMo") for n in notes)
    assert not any(n.startswith("dropout") for n in show_report("gpt3-175b").notes)
    # the masks are saved activations: the same layer holds less without them
    nemotron = load_model("nemotron3-8b")
    without = saved_tensors(nemotron, 0, 4096, 1, ActivationOptions(t=2))
    with_masks = saved_tensors(nemotron, 0, 4096, 1, ActivationOptions(t=2, dropout=True))
    assert sum(r.bytes for r in without) < sum(r.bytes for r in with_masks)


@pytest.mark.parametrize(("spec", "seq", "opts", "error", "text"), [
    (LLAMA, 4096, {"attention": "eager", "cp": 2}, InputError, "--attention flash"),
    (LLAMA, 4100, {"t": 8}, DivisibilityError, "seq/cp"),
    (LLAMA, 3072, {"t": 3}, DivisibilityError, "num_attention_heads=32"),
    (LLAMA, 4095, {"cp": 2}, DivisibilityError, "seq=4095"),
])  # fmt: skip
def test_bad_inputs_say_what_to_do(spec, seq, opts, error, text):
    with pytest.raises(error, match=text):
        saved_tensors(spec, 0, seq, 1, ActivationOptions(**opts))


def test_kv_heads_that_do_not_divide_t_are_rejected_and_out_of_range_layers_too():
    spec = LLAMA.model_copy(update={"num_attention_heads": 36, "num_key_value_heads": 12})
    with pytest.raises(DivisibilityError, match="num_key_value_heads=12"):
        saved_tensors(spec, 0, 4608, 1, ActivationOptions(t=9))
    with pytest.raises(InputError, match="layer_index=2"):
        saved_tensors(LLAMA, 2, 4096, 1)


def test_explain_terms_list_every_tensor_with_its_split():
    records = saved_tensors(LLAMA, 0, 4096, 1, ActivationOptions(t=8)) + shared_tensors(
        LLAMA, 4096, 1
    )
    terms = tensor_terms(records)
    assert [t.key for t in terms] == [r.name for r in records]
    q = next(t for t in terms if t.key == "attention.q")
    assert q.value == 4096 * 4 * 128 * 2 and q.inputs["split"] == "TP"
    assert q.formula == "4096 x 1 x 4 x 128 x 2 B (bf16)"
    assert next(t for t in terms if t.key == "input_norm.input").inputs["split"] == "SP"
