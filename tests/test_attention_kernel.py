"""The attention kernel as a run option (``--attention flash|eager``): eager attention, Megatron's
own before FlashAttention (Korthikanti et al. 2022 §4.1: QKᵀ, a fused scale-mask-softmax, dropout
on the probabilities, then ·V), materialises every score, in the step time as in memory, and the
planner, the layout and ``tpcalc validate`` read the same choice."""

from __future__ import annotations

import json

import pytest
from msgspec.structs import replace

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout, layout_problems
from tpcalc.calc.layout.memory import rank_memory
from tpcalc.calc.plan import search as S
from tpcalc.calc.plan.request import build_request
from tpcalc.calc.time.ops import OpKind, Pass, Shard, embedding_ops, layer_ops
from tpcalc.calc.time.step import TimeOptions, scores_of, step_time
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute
from tpcalc.errors import ConfigError
from tpcalc.reports.validate_time import (
    _granularity,
    _zero_stage,
    attention_kernel,
    tokens_from_tflops,
)

GPT3 = load_model("gpt3-175b")
LLAMA8 = load_model("llama3-8b")
A100 = load_hardware("a100-80g")
EAGER = MemoryTechniques(attention="eager")


def _core(spec, shard: Shard) -> list:
    return [o for o in layer_ops(spec, shard, 0) if o.name.startswith("core_attn")]


def test_eager_attention_materialises_every_score_with_its_softmax_and_dropout():
    s, b, t = 2048, 2, 8
    heads, d = 96 // t, 128  # GPT-3 175B: 96 heads of 128 on 8 ranks
    shard = Shard(seq=s, micro_batch=b, tp=t, **scores_of(GPT3, EAGER))
    ops = _core(GPT3, shard)
    assert not [o for o in ops if o.kind is OpKind.attention]  # no fused kernel
    qk = next(o for o in ops if o.name == "core_attn_qk" and o.phase is Pass.forward)
    assert (qk.m, qk.n, qk.k, qk.groups) == (s, s, d, b * heads)  # every score, masked or not
    scores = b * heads * s * s
    softmax = {o.phase: o.bytes for o in ops if o.name == "core_attn_softmax"}
    # bf16 probabilities: softmax reads scores, writes probabilities (2 x 2 B); backward reads
    # both and writes the score gradient (3 x 2 B)
    assert softmax == {Pass.forward: 4 * scores, Pass.backward_input: 6 * scores}
    dropout = {o.phase: o.bytes for o in ops if o.name == "core_attn_dropout"}
    # native_dropout: p in, output and a 1-byte mask out; backward: gradient and mask in, out
    assert dropout == {Pass.forward: 5 * scores, Pass.backward_input: 5 * scores}


def test_attention_dropout_follows_the_runs_dropout():
    # GPT-style models train with dropout by default, Llama-style without; --no-dropout drops it
    assert scores_of(GPT3, EAGER)["attention_dropout"]
    assert not scores_of(LLAMA8, EAGER)["attention_dropout"]
    assert not scores_of(GPT3, replace(EAGER, dropout=False))["attention_dropout"]
    # a flash kernel applies dropout in-kernel: no materialised scores, no dropout op
    assert scores_of(GPT3, MemoryTechniques()) == {
        "materialised_scores": False, "attention_dropout": False, "hidden_dropout": True,
    }  # fmt: skip


def test_hidden_dropout_writes_and_reads_a_mask_at_every_residual_and_the_embedding():
    s, t, h = 2048, 8, 12288  # GPT-3 175B, SP on 8 ranks: the adds see s/t tokens
    elements = s // t * h
    gpt = Shard(seq=s, micro_batch=1, tp=t, **scores_of(GPT3, MemoryTechniques()))
    plain = replace(gpt, hidden_dropout=False)

    def bytes_of(ops, name):
        return {o.phase: o.bytes for o in ops if o.name == name}

    for name in ("attn_residual", "mlp_residual"):
        # bias-dropout-add: x and the residual in, the sum out (3 x 2 B), plus a 1-byte mask
        # written forward and read backward (Megatron-Core fused_bias_dropout)
        assert bytes_of(layer_ops(GPT3, gpt, 0), name) == {
            Pass.forward: 7 * elements, Pass.backward_input: 7 * elements,
        }  # fmt: skip
        assert bytes_of(layer_ops(GPT3, plain, 0), name) == {
            Pass.forward: 6 * elements, Pass.backward_input: 6 * elements,
        }  # fmt: skip
    names = [o.name for o in embedding_ops(GPT3, gpt) if o.phase is Pass.forward]
    # learned positions: their lookup and add; then the embedding dropout
    assert names == ["embedding", "position_embedding", "position_add", "embedding_dropout"]
    assert bytes_of(embedding_ops(GPT3, gpt), "embedding_dropout") == {
        Pass.forward: 5 * elements, Pass.backward_input: 5 * elements,
    }  # fmt: skip
    llama = Shard(seq=s, micro_batch=1, tp=t, **scores_of(LLAMA8, MemoryTechniques()))
    assert [o.name for o in embedding_ops(LLAMA8, llama)] == ["embedding", "embedding"]


def test_rope_is_priced_on_rotary_models_only():
    s, t = 2048, 8
    shard = Shard(seq=s, micro_batch=1, tp=t)
    assert not [o for o in layer_ops(GPT3, shard, 0) if o.name == "rope"]  # learned positions
    rope = {o.phase: o.bytes for o in layer_ops(LLAMA8, shard, 0) if o.name == "rope"}
    # Llama 3 8B: 32 query and 8 KV heads of 128 over 8 ranks, q and k read and written (bf16)
    elements = s * (32 // t + 8 // t) * 128
    assert rope == {Pass.forward: 2 * 2 * elements, Pass.backward_input: 2 * 2 * elements}


def _case(memory: MemoryTechniques, cp: int = 1) -> tuple[ParallelLayout, LayoutRun]:
    layout = ParallelLayout(gpus_per_node=8, tp=8, cp=cp, pp=8, dp=1, zero=ZeroStage.none)
    run = LayoutRun(
        seq=2048, microbatches=64, micro_batch=1, sp=False, recompute=Recompute.full,
        memory=memory,
    )  # fmt: skip
    return layout, run


def test_eager_attention_makes_the_step_slower_and_keeps_its_gemms():
    layout, flash_run = _case(MemoryTechniques())
    eager_run = replace(flash_run, memory=EAGER)
    flash = step_time(GPT3, A100, layout, flash_run, TimeOptions())
    eager = step_time(GPT3, A100, layout, eager_run, TimeOptions())
    assert eager.attention_time_s == 0 < flash.attention_time_s
    assert eager.memory_bound_time_s > flash.memory_bound_time_s
    assert eager.step_time_s > flash.step_time_s


def test_context_parallelism_needs_a_flash_kernel(cli):
    layout, run = _case(EAGER, cp=2)
    layout = replace(layout, pp=4)
    assert any("needs a flash attention kernel" in p for p in layout_problems(GPT3, layout, run))
    res = cli(
        "layout", "-m", "gpt3-175b", "--hardware", "a100-80g", "--tp", "8", "--cp", "2",
        "--pp", "4", "--seq", "2048", "--attention", "eager",
    )  # fmt: skip
    assert res.code == 1
    assert res.err.count("\n") == 1 and "--attention flash or --cp 1" in res.err


def test_the_planner_screens_and_times_eager_attention_as_layout_does():
    req = build_request(
        GPT3, A100, gpus=64, seq=2048, global_batch=64, top_k=3, memory=EAGER,
    )  # fmt: skip
    result = S.plan(req)
    assert dict(result.rejections)["kernel: cp needs flash attention"] > 0
    for c in result.top:
        assert c.layout.cp == 1 and c.run.memory.attention == "eager"
        assert c.memory_bytes <= c.capacity_bytes
        ranks = rank_memory(
            GPT3, c.layout, seq=c.run.seq, micro_batch=c.run.micro_batch, sp=c.run.sp,
            recompute=c.run.recompute, recipe=c.run.recipe, vpp=c.run.vpp,
            schedule=c.run.schedule, microbatches=c.run.microbatches,
            activations=c.run.activations, techniques=c.run.memory,
        )  # fmt: skip
        assert max(r.total_bytes for r in ranks) == c.memory_bytes
        assert step_time(GPT3, A100, c.layout, c.run, c.options).step_time_s == c.step_time_s


def test_plan_passes_the_attention_kernel_to_its_reproduce_command(cli):
    args = (
        "plan", "-m", "gpt3-175b", "--hardware", "a100-80g", "--gpus", "64", "--seq", "2048",
        "--global-batch", "64", "--attention", "eager", "--top", "1",
    )  # fmt: skip
    res = cli(*args, "--format", "json")
    assert res.code == 0, res.err
    assert json.loads(res.out)[0]["attention"] == "eager"
    table = cli(*args)
    reproduce = next(x for x in table.out.splitlines() if x.startswith("Reproduce the best"))
    assert reproduce.endswith("--attention eager")


# tpcalc validate reads the kernel and the 2021 options from a row's recipe


def test_validate_reads_the_2021_megatron_options():
    assert attention_kernel({"attention_backend": "local"}).value == "eager"
    assert attention_kernel({"attention_backend": "unfused"}).value == "eager"
    assert attention_kernel({}).value == "flash"
    assert _granularity({"recompute_granularity": "full"}) is Recompute.full
    assert _granularity({"recompute_granularity": "full", "recompute_num_layers": 5}) is (
        Recompute.none  # block recompute of 5 layers per chunk (TimeOptions.recompute_layers)
    )
    assert _zero_stage({}, {"use_distributed_optimizer": False}) is ZeroStage.none
    assert _zero_stage({}, {}) is ZeroStage.optimizer


def _row(convention: dict | None, tflops: float = 137) -> dict:
    measured = {"tokens_per_s_per_gpu": None, "model_tflop_per_s_per_gpu": tflops}
    if convention:
        measured["flop_convention"] = convention
    return {"id": "r", "seq_length": 2048, "measured": measured}


def test_measured_tokens_are_counted_back_with_the_sources_flop_convention():
    # Narayanan et al. 2021 Eq. 3 per token, written out here for GPT 1.7B (h 2304, 24 layers):
    # 96·l·h²·(1 + s/(6h) + V/(16·l·h)) with s = 2,048, V = 51,200
    spec = GPT3.model_copy(update={"hidden_size": 2304, "num_hidden_layers": 24})
    per_token = 96 * 24 * 2304**2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    got = tokens_from_tflops(_row({"name": "narayanan-2021-eq3", "vocab": 51200}), spec)
    assert got == pytest.approx(137e12 / per_token, rel=1e-12)
    assert tokens_from_tflops(_row(None), spec) is None  # no convention: not scored
    with pytest.raises(ConfigError, match="valid: narayanan-2021-eq3"):
        tokens_from_tflops(_row({"name": "palm", "vocab": 1}), spec)


def test_selective_recompute_reruns_every_kernel_of_the_materialised_core():
    # Korthikanti et al. 2022 §5: selective recompute re-runs the core attention in the backward;
    # materialised, that is its two batched GEMMs, the softmax and the dropout (each forward op
    # whose name the core_attn module lists), so the step pays exactly their forward time
    from tpcalc.calc.time.ops import UNFUSED_PARTS
    from tpcalc.calc.time.step import RECOMPUTE_MODULE_OPS

    assert {f"core_attn_{p}" for p in UNFUSED_PARTS} <= set(RECOMPUTE_MODULE_OPS["core_attn"])
    layout, run = _case(EAGER)
    run = replace(run, recompute=Recompute.selective, sp=True)
    st = step_time(GPT3, A100, layout, run, TimeOptions())
    none = step_time(GPT3, A100, layout, replace(run, recompute=Recompute.none), TimeOptions())
    assert st.recompute_time_s > 0 == none.recompute_time_s
    assert st.step_time_s > none.step_time_s


# Megatron-LM of 2021-2022 waits on every pipeline send and, without SP, scatters each over the
# TP ranks (Narayanan et al. 2021 §4.1, --scatter-gather-tensors-in-pipeline)


def test_waiting_pipeline_sends_are_every_send_and_scatter_gather_sends_a_tth():
    from tpcalc.calc.links.collectives import Collective
    from tpcalc.calc.pipeline.schedule import P2P_SENDS_PER_MICROBATCH
    from tpcalc.calc.time.roofline import collective_time_s, rates
    from tpcalc.calc.time.step import Overlap

    layout, run = _case(EAGER)
    wait = TimeOptions(overlap=Overlap(pp_p2p=False))
    plain = step_time(GPT3, A100, layout, run, wait)
    scattered = step_time(GPT3, A100, layout, run, replace(wait, pp_scatter_gather=True))
    r = rates(A100, run.dtype)
    msg = 2048 * GPT3.hidden_size * 2  # s·b·h in bf16, no SP: the whole activation
    p2p = collective_time_s(r, Collective.p2p, msg, 2, 2)  # PP hops cross nodes (TP 8 per node)
    sends = P2P_SENDS_PER_MICROBATCH * (run.microbatches + layout.pp - 1)  # every send waits
    # GPT-3's tied head: the last stage's copy of the embedding all-reduces its V/t × h BF16
    # gradient with the first stage's once a step (Megatron-Core finalize_model_grads)
    assert GPT3.tie_word_embeddings
    grad = GPT3.vocab_size * GPT3.hidden_size // layout.tp * 2
    sync = collective_time_s(r, Collective.all_reduce, grad, 2, 2)
    assert plain.pp_comm_time_s == pytest.approx(sends * p2p + sync, rel=1e-12)
    one = collective_time_s(r, Collective.p2p, msg / 8, 2, 2) + collective_time_s(
        r, Collective.all_gather, msg, 8, 1
    )  # 1/t over each rank's link, then an all-gather over NVLink
    assert scattered.pp_comm_time_s == pytest.approx(sends * one + sync, rel=1e-12)
    assert scattered.step_time_s < plain.step_time_s
    # with SP the activation between stages is already the s/t slice: nothing to scatter
    sp_run = replace(run, sp=True)
    assert step_time(GPT3, A100, layout, sp_run, replace(wait, pp_scatter_gather=True)) == (
        step_time(GPT3, A100, layout, sp_run, wait)
    )


def test_validate_reads_a_recipes_waiting_pipeline_sends():
    from tpcalc.reports.validate_time import case_of, load_runs

    row = next(r for r in load_runs() if r["id"] == "nemo-24.07-nemotron-340b-h100-128")
    assert row["recipe"]["fields"]["overlap_p2p_comm"] is False  # its NeMo launcher config
    case = case_of(row)
    assert case.options.overlap.pp_p2p is False and case.options.pp_scatter_gather is False


def test_layout_takes_the_pipeline_send_options_and_plan_reproduces_them(cli):
    base = (
        "layout", "-m", "megatron-gpt-530b", "--hardware", "a100-80g", "--tp", "8", "--pp",
        "35", "--vpp", "3", "--dp", "1", "--zero", "0", "--microbatches", "280", "--schedule",
        "interleaved", "--no-sp", "--recompute", "full", "--dtype", "fp16", "--attention",
        "eager", "--format", "json",
    )  # fmt: skip
    steps = {}
    for flags in ((), ("--no-pp-overlap",), ("--no-pp-overlap", "--pp-scatter-gather")):
        res = cli(*base, *flags)
        assert res.code == 0, res.err
        rows = json.loads(res.out)
        steps[flags] = next(r["step_time_s"] for r in rows if r.get("step_time_s"))
        echo = rows[0]
        assert echo["pp_overlap"] is ("--no-pp-overlap" not in flags)
        assert echo["pp_scatter_gather"] is ("--pp-scatter-gather" in flags)
    hidden, waited, scattered = steps.values()
    assert hidden < scattered < waited


def test_the_planner_prices_scattered_waiting_sends_as_layout_does():
    # its bounds take the 1/t message as a floor of every send; the step of each pick is layout's
    from tpcalc.calc.time.step import Overlap

    opts = TimeOptions(overlap=Overlap(pp_p2p=False), pp_scatter_gather=True)
    req = build_request(
        GPT3, A100, gpus=64, seq=2048, global_batch=64, top_k=3, memory=EAGER,
        time_options=opts, pins={"sp": [False], "pp": [2, 4, 8], "pp_overlap": [False]},
    )  # fmt: skip
    result = S.plan(req)
    assert result.top
    for c in result.top:
        assert c.options.pp_scatter_gather and not c.options.overlap.pp_p2p
        assert step_time(GPT3, A100, c.layout, c.run, c.options).step_time_s == c.step_time_s
