"""Memory techniques published runs use (issue 10 §3): each option against its source."""

from __future__ import annotations

import pytest

from tpcalc.calc.activations.exact.layer import saved_tensors
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.techniques import check_recompute_modules
from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.layout.memory import rank_activation_bytes
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.catalog import load_model
from tpcalc.choices import Schedule, StateRecipe
from tpcalc.errors import InputError

S, H, K, F_MOE, E = 4096, 7168, 8, 2048, 256  # DeepSeek-V3 config.json, seq 4096 (§4.2)
MOE_LAYER = 10  # first_k_dense_replace = 3: layer 10 is MoE


@pytest.fixture(scope="module")
def ds():
    return load_model("deepseek-v3")


def _by_name(records):
    return {r.name: r for r in records}


def test_fp8_cache_stores_linear_inputs_in_one_byte(ds):
    # DeepSeek-V3 §3.3.2: the dispatched tokens (expert fc1 input) and the SwiGLU input in FP8
    plain = _by_name(saved_tensors(ds, MOE_LAYER, S, 1))
    fp8 = _by_name(saved_tensors(ds, MOE_LAYER, S, 1, ActivationOptions(fp8_cache=True)))
    assert plain["moe.permuted_tokens"].bytes == S * K * H * 2
    assert fp8["moe.permuted_tokens"].bytes == S * K * H * 1
    assert fp8["moe.experts.fc1_output"].bytes == S * K * 2 * F_MOE * 1
    # the router input stays BF16 (gating runs in high precision, §3.3.1)
    assert fp8["moe.input"].bytes == plain["moe.input"].bytes == S * H * 2


def test_moe_act_and_probs_in_act_drop_what_megatron_does_not_keep(ds):
    opts = ActivationOptions(recompute_modules=("moe_act",), moe_probs_in_act=True)
    names = _by_name(saved_tensors(ds, MOE_LAYER, S, 1, opts))
    # moe_act: CheckpointWithoutOutput discards the SwiGLU output (fc2 input), keeps fc1 output
    assert "moe.experts.fc2_input" not in names and "moe.experts.fc1_output" in names
    # activation_func_with_probs: the combine keeps no expert output [T·k, h]
    assert "moe.expert_output" not in names
    # the combine-side weighting of older Megatron-Core keeps it for d(probs)
    combine = _by_name(
        saved_tensors(ds, MOE_LAYER, S, 1, ActivationOptions(moe_probs_in_act=False))
    )
    assert combine["moe.expert_output"].bytes == S * K * H * 2
    saved = sum(r.bytes for r in combine.values()) - sum(r.bytes for r in names.values())
    assert saved == S * K * F_MOE * 2 + S * K * H * 2  # fc2 input + expert output, BF16
    # today's Megatron-Core weights inside the activation, which is the default
    default = _by_name(saved_tensors(ds, MOE_LAYER, S, 1))
    assert "moe.expert_output" not in default
    assert sum(r.bytes for r in default.values()) - sum(r.bytes for r in names.values()) == (
        S * K * F_MOE * 2  # moe_act's fc2 input alone
    )


def test_layernorm_and_mla_up_proj_recompute(ds):
    # DeepSeek-V3 §3.2.3: recompute all RMSNorms and the MLA up-projections
    opts = ActivationOptions(recompute_modules=("layernorm", "mla_up_proj"))
    names = _by_name(saved_tensors(ds, MOE_LAYER, S, 1, opts))
    for gone in ("attention.qkv_input", "moe.input", "attention.q", "attention.k", "attention.v"):
        assert gone not in names
    # the norm inputs (to recompute from) and the latents (to recompute q, k, v from) stay
    assert "input_norm.input" in names and "attention.kv_up_input" in names
    assert "attention.out" in names  # O: the output projection's input


def test_core_attn_module_is_selective_recompute(ds):
    sel = saved_tensors(ds, MOE_LAYER, S, 1, ActivationOptions(recompute="selective"))
    mod = saved_tensors(ds, MOE_LAYER, S, 1, ActivationOptions(recompute_modules=("core_attn",)))
    assert sum(r.bytes for r in sel) == sum(r.bytes for r in mod)


def test_unknown_recompute_module_names_the_valid_ones():
    with pytest.raises(InputError, match="mla_up_proj"):
        check_recompute_modules(("attn",))


def test_dualpipe_holds_p_minus_r_and_r_plus_1_micro_batches():
    # DeepSeek-V3 §3.2.1 Table 2: PP+1 micro-batches of activations per rank, here split by
    # direction: stage r holds p - r (fed from rank 0), stage p-1-r holds r + 1
    p, per_layer = 4, [1.0, 10.0, 100.0, 1000.0]  # one layer per stage
    got = rank_activation_bytes(Schedule.dualpipe, p, 8, 1, per_layer)
    assert got == [4 * 1 + 1 * 1000, 3 * 10 + 2 * 100, 2 * 100 + 3 * 10, 1 * 1000 + 4 * 1]
    assert rank_activation_bytes(Schedule.dualpipe, p, 8, 1, [1.0] * 4) == [p + 1.0] * p


@pytest.mark.parametrize(
    ("recipe", "per_param"),
    [
        (StateRecipe.bf16_moments, 2 + 4 + 4 + 2 + 2),  # DeepSeek-V3 §3.3.3
        (StateRecipe.bf16_grads_moments, 2 + 2 + 4 + 2 + 2),
        (
            StateRecipe.bf16_states,
            2 + 2 + 2 + 2,
        ),  # Apex DistributedFusedAdam, dtype bf16, no master
        (StateRecipe.fp8_params, 1 + 4 + 4 + 4 + 4),  # TE FP8 params, FP32 main params
        (StateRecipe.fp8_params_bf16_moments, 1 + 4 + 4 + 2 + 2),
    ],
)
def test_precision_aware_recipes(recipe, per_param):
    assert recipe_bytes(recipe).total_bytes == per_param


def test_expert_data_parallel_group_with_etp():
    # Megatron-Core: expert-DP = tp·cp·dp / (ep·etp)
    lay = ParallelLayout(tp=4, cp=2, dp=8, ep=8, etp=2, gpus_per_node=8)
    assert lay.expert_dp == 4 * 2 * 8 // (8 * 2)


def test_cli_layout_with_techniques_fits_deepseek_v3(cli):
    import json

    base = ["layout", "-m", "deepseek-v3", "--hardware", "h800", "--pp", "16", "--dp", "128",
            "--ep", "64", "--zero", "1", "--schedule", "dualpipe", "-f", "json"]  # fmt: skip
    before = json.loads(cli(*base).out)[-1]
    after = json.loads(cli(*base, "--recompute", "none", "--recompute-modules",
                           "layernorm,mla_up_proj,moe_act", "--fp8-cache", "--moe-probs-in-act",
                           "--state-recipe", "bf16-moments").out)[-1]  # fmt: skip
    assert before["memory_fits"] is False and after["memory_fits"] is True
    assert after["recompute_modules"] == "layernorm,mla_up_proj,moe_act"
    bad = cli(*base, "--recompute-modules", "attn")
    assert bad.code == 1 and "unknown" in bad.err and "Traceback" not in bad.err


@pytest.mark.parametrize(
    ("command", "key"),
    [
        (["memory", "-m", "deepseek-v3", "-t", "1", "--recompute", "none"],
         "exact_activation_bytes"),
        (["zero", "-m", "deepseek-v3", "--dp", "8", "--zero", "1", "--recompute", "none"],
         "activation_bytes"),
        (["pipeline", "-m", "deepseek-v3", "--pp", "16", "--recompute", "none"],
         "stage_activation_bytes"),
    ],
)  # fmt: skip
def test_memory_zero_pipeline_take_the_techniques(cli, command, key):
    import json

    base = json.loads(cli(*command, "-f", "json").out)[0]
    opts = ["--recompute-modules", "layernorm,moe_act", "--fp8-cache", "--moe-probs-in-act"]
    cut = json.loads(cli(*command, *opts, "-f", "json").out)[0]
    assert cut[key] < base[key]
    assert "layernorm,moe_act" in json.dumps(cut)


def test_offload_layers_moves_activations_to_host_with_its_pcie_time(cli):
    import json

    # Megatron --cpu-offloading-num-layers 2 of the 8 layers of a Llama 3 405B stage; PCIe
    # Gen5 x16 at 64 GB/s one way (hardware config); out after the forward, back before backward
    base = ["layout", "-m", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--zero",
            "1", "--microbatches", "16", "-f", "json"]  # fmt: skip
    plain = json.loads(cli(*base).out)[-1]
    off = json.loads(cli(*base, "--offload-layers", "2").out)[-1]
    assert off["offloaded_activation_bytes"] == pytest.approx(plain["activation_bytes"] * 2 / 8)
    assert off["activation_bytes"] == pytest.approx(plain["activation_bytes"] * 6 / 8)
    one_mb = plain["activation_bytes"] / plain_in_flight(plain)
    assert off["offload_transfer_bytes_per_step"] == pytest.approx(2 * 16 * one_mb * 2 / 8)
    assert off["offload_transfer_time_s"] == pytest.approx(
        off["offload_transfer_bytes_per_step"] / 64e9
    )
    bad = cli(*base, "--offload-layers", "2", "--hardware", "b200")
    assert bad.code == 1 and "host_bandwidth_bytes_per_s" in bad.err


def plain_in_flight(row) -> int:
    """1F1B: the most loaded rank r holds p - r micro-batches (Narayanan et al. 2021 §2.2)."""
    return 16 - row["worst_pp_rank"]


def test_recompute_modules_replace_selectives_core_attn(ds):
    # Megatron transformer_config.py: recompute_modules defaults to ["core_attn"]; a given list
    # replaces it, so selective + [moe_act] keeps core attention's softmax statistics
    sel = ActivationOptions(recompute="selective", recompute_modules=("moe_act",))
    plain = ActivationOptions(recompute_modules=("moe_act",))
    a = saved_tensors(ds, MOE_LAYER, S, 1, sel)
    b = saved_tensors(ds, MOE_LAYER, S, 1, plain)
    assert [r.name for r in a] == [r.name for r in b]
    assert "attention.softmax_lse" in {r.name for r in a}


# Transformer Engine FP8 (TransformerEngine module/linear.py: _Linear.forward keeps
# ``saved_inputmat``, the quantized input, for the weight gradient; layernorm_linear.py keeps the
# quantized norm output): Llama 3 8B config.json, h 4096, 32 heads of 128, ffn 14336, seq 4096.
L_S, L_H, L_F = 4096, 4096, 14336


def test_te_fp8_keeps_linear_inputs_in_one_byte_and_activation_inputs_in_two():
    llama = load_model("llama3-8b")
    plain = _by_name(saved_tensors(llama, 0, L_S, 1))
    te = _by_name(saved_tensors(llama, 0, L_S, 1, ActivationOptions(fp8_linear_inputs=True)))
    for name, width in (("attention.qkv_input", L_H), ("mlp.fc1_input", L_H),
                        ("mlp.fc2_input", L_F)):  # fmt: skip
        assert plain[name].bytes == L_S * width * 2 and te[name].bytes == L_S * width * 1
    # the SwiGLU input stays BF16: the bias-SwiGLU function keeps it, not a Linear
    assert te["mlp.fc1_output"].bytes == plain["mlp.fc1_output"].bytes == L_S * 2 * L_F * 2
    # FlashAttention keeps O in BF16; the out-projection adds its own FP8 copy
    assert te["attention.out"].bytes == plain["attention.out"].bytes == L_S * L_H * 2
    assert te["attention.out_fp8"].bytes == L_S * L_H * 1
    saved = sum(r.bytes for r in plain.values()) - sum(r.bytes for r in te.values())
    assert saved == L_S * (L_H + L_H + L_F) - L_S * L_H


def test_fp8_runs_keep_fp8_linear_inputs_unless_told_otherwise():
    from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques
    from tpcalc.units import Dtype

    assert LayoutRun(seq=4096, microbatches=1, dtype=Dtype.fp8).memory.fp8_linear_inputs is True
    assert LayoutRun(seq=4096, microbatches=1).memory.fp8_linear_inputs is False
    off = MemoryTechniques(fp8_linear_inputs=False)
    run = LayoutRun(seq=4096, microbatches=1, dtype=Dtype.fp8, memory=off)
    assert run.memory.fp8_linear_inputs is False


def test_cli_layout_fp8_echoes_and_prices_fp8_linear_inputs(cli):
    import json

    # Llama 3 8B, TP1 PP1 DP8, one micro-batch in flight per rank, selective recompute
    base = ["layout", "-m", "llama3-8b", "--dp", "8", "--seq", str(L_S), "--microbatches", "1",
            "--dtype", "fp8", "-f", "json"]  # fmt: skip
    on = json.loads(cli(*base).out)[-1]
    off = json.loads(cli(*base, "--no-fp8-linear-inputs").out)[-1]
    assert on["fp8_linear_inputs"] is True and off["fp8_linear_inputs"] is False
    layers = 32  # num_hidden_layers
    per_layer = L_S * (L_H + L_H + L_F) - L_S * L_H  # the test above, one byte per element
    assert off["activation_bytes"] - on["activation_bytes"] == layers * per_layer
    bf16 = json.loads(cli(*base[:-4], "-f", "json").out)[-1]
    assert bf16["fp8_linear_inputs"] is False


@pytest.mark.parametrize("offloaded", [30, 61])
def test_offload_leaves_the_mtp_module_and_loss_heads_on_the_gpu(ds, offloaded):
    # Megatron-Core enters the CPU-offload context around TransformerBlock's layers only
    # (transformer_block.py, cpu_offloading_num_layers); the MTP module and the two loss heads
    # (DeepSeek-V3 §2.2) run after the block, so none of their activations leave the GPU.
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.calc.layout.memory import layer_activation_bytes, rank_memory
    from tpcalc.choices import Recompute

    layout = ParallelLayout(
        gpus_per_node=8, tp=1, pp=1, dp=8, ep=8
    )  # one stage: the decoder and the last chunk
    run = dict(
        seq=S, micro_batch=1, microbatches=4, vpp=1, schedule=Schedule.one_f_one_b,
        recipe=StateRecipe.megatron18, sp=False, recompute=Recompute.none,
    )  # fmt: skip
    (plain,) = rank_memory(ds, layout, **run, techniques=MemoryTechniques())
    (off,) = rank_memory(ds, layout, **run, techniques=MemoryTechniques(offload_layers=offloaded))
    per_layer = layer_activation_bytes(
        ds, layout, seq=S, micro_batch=1, sp=False, recompute=Recompute.none
    )
    decoder = sum(per_layer)  # 1F1B at pp 1: one micro-batch in flight
    assert off.offload_bytes == decoder * offloaded / 61
    assert off.activation_bytes == plain.activation_bytes - off.offload_bytes
    # what stays with every layer offloaded: the MTP layer (as the last decoder layer) and more
    if offloaded == 61:
        assert off.activation_bytes == plain.activation_bytes - decoder
        assert off.activation_bytes > per_layer[-1]
