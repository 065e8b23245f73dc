"""layout: activations per layer kind from the exact model (default) or the paper formula."""

from __future__ import annotations

import json

import pytest

from tpcalc.calc.activations.paper import paper_layer
from tpcalc.calc.activations.paper_explain import layer_terms
from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.layout.memory import layer_activation_bytes
from tpcalc.catalog import load_model
from tpcalc.choices import ActivationModel, Recompute


def test_paper_is_uniform_and_equals_table2_on_s_over_cp():
    spec = load_model("llama3-70b")
    layout = ParallelLayout(gpus_per_node=8, tp=8, cp=2, pp=1, dp=1)
    per_layer = layer_activation_bytes(spec, layout, seq=8192, micro_batch=1, sp=True,
                                       recompute=Recompute.selective,
                                       model=ActivationModel.paper)  # fmt: skip
    table2 = layer_terms(paper_layer(spec, seq=4096, micro_batch=1, t=8, sp=True,
                               recompute=Recompute.selective))[-1].value  # fmt: skip
    assert per_layer == [table2] * spec.num_hidden_layers


def test_exact_differs_by_layer_kind_for_a_hybrid_model():
    spec = load_model("qwen3.8")
    layout = ParallelLayout(gpus_per_node=8, tp=4, cp=1, pp=1, dp=1)
    per_layer = layer_activation_bytes(spec, layout, seq=4096, micro_batch=1, sp=True,
                                       recompute=Recompute.none)  # fmt: skip
    kinds = spec.resolved_layer_types
    full = {v for v, k in zip(per_layer, kinds, strict=True) if k == "full_attention"}
    linear = {v for v, k in zip(per_layer, kinds, strict=True) if k == "linear_attention"}
    assert len(full) == 1 and len(linear) == 1 and full != linear


def test_cli_echoes_the_activation_model(cli):
    args = ("layout", "-m", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "2", "-f", "json")
    exact = json.loads(cli(*args).out)[-1]
    paper = json.loads(cli(*args, "--activations", "paper").out)[-1]
    assert exact["activations"] == "exact" and paper["activations"] == "paper"
    assert exact["activation_bytes"] != paper["activation_bytes"]


# Llama 3 8B at TP1, s = 8192, b = 1: what the last stage keeps after its last layer (the
# final RMSNorm's BF16 input and FP32 1/rms, the output layer's BF16 input), outside any block
HEAD_8K = 8192 * 4096 * 2 + 8192 * 4 + 8192 * 4096 * 2


def _block_memory(block, *, pp=1, vpp=1, recompute=Recompute.none):
    """Llama 3 8B, TP1, 8k, micro-batch 1 under 1F1B (interleaved with vpp > 1): every rank."""
    from tpcalc.calc.layout.memory import rank_memory
    from tpcalc.choices import Schedule, StateRecipe

    spec = load_model("llama3-8b")
    layout = ParallelLayout(gpus_per_node=8, tp=1, cp=1, pp=pp, dp=1)
    return rank_memory(
        spec, layout, seq=8192, micro_batch=1, microbatches=8, vpp=vpp,
        schedule=Schedule.interleaved if vpp > 1 else Schedule.one_f_one_b,
        recipe=StateRecipe.zero16, sp=False, recompute=recompute, block_layers=block,
    )  # fmt: skip


def test_block_recompute_keeps_the_first_n_layers_input_only():
    # Megatron --recompute-method block --recompute-num-layers 5 on Llama 3 8B (32 layers,
    # h = 4096) at TP1, s = 8192, b = 1: the 5 recomputed layers keep their input, s·b·h·2 B
    # (Korthikanti et al. 2022 §5: full recompute stores the layer input), the other 27 their
    # plain activations; one layer's full recompute is rebuilt in backward.
    spec = load_model("llama3-8b")
    layout = ParallelLayout(gpus_per_node=8, tp=1, cp=1, pp=1, dp=1)
    plain = layer_activation_bytes(spec, layout, seq=8192, micro_batch=1, sp=False,
                                   recompute=Recompute.none)[0]  # fmt: skip
    (rank,) = _block_memory(5)
    assert rank.activation_bytes == 27 * plain + 5 * 8192 * 4096 * 2 + HEAD_8K
    assert rank.block_recompute_layers == 5
    (full,) = _block_memory(None, recompute=Recompute.full)
    assert rank.recompute_working_bytes == full.recompute_working_bytes > 0
    (none,) = _block_memory(None)
    assert none.recompute_working_bytes == 0 and none.block_recompute_layers == 0


def test_block_recompute_counts_per_virtual_stage():
    # NeMo docs (Activation Recomputation): with virtual pipelining the count is per virtual
    # stage. PP2 × VP2 gives 4 chunks of 8 layers; block 3 recomputes 3 of each, 12 in all, so
    # every rank holds 6 of its 16 layers input-only, whatever its in-flight count.
    spec = load_model("llama3-8b")
    layout = ParallelLayout(gpus_per_node=8, tp=1, cp=1, pp=2, dp=1)
    plain = layer_activation_bytes(spec, layout, seq=8192, micro_batch=1, sp=False,
                                   recompute=Recompute.none)[0]  # fmt: skip
    kept = 8192 * 4096 * 2
    none, block = _block_memory(None, pp=2, vpp=2), _block_memory(3, pp=2, vpp=2)
    for r, (n, b) in enumerate(zip(none, block, strict=True)):
        head = n.in_flight / 2 * HEAD_8K if r == 1 else 0  # rank 1 runs the last chunk
        per_chunk = (n.activation_bytes - head) / 16  # two chunks, each at n.in_flight / 2
        expected = per_chunk / plain * (10 * plain + 6 * kept) + head
        assert b.activation_bytes == pytest.approx(expected)


@pytest.mark.parametrize("recompute", [Recompute.none, Recompute.selective])
def test_block_recompute_shrinks_with_n_down_to_full(recompute):
    # one micro-batch in flight (PP1): a block of 1 saves one layer and rebuilds one in
    # backward, so the peak stays; each further layer saves its activations less its input
    totals = [max(r.total_bytes for r in _block_memory(n, recompute=recompute))
              for n in (None, 1, 5, 16, 31)]  # fmt: skip
    assert totals[0] == totals[1] > totals[2] > totals[3] > totals[4]

    def parts(ranks):
        return [(r.activation_bytes, r.recompute_working_bytes, r.total_bytes) for r in ranks]

    full = parts(_block_memory(None, recompute=Recompute.full))
    for n in (32, 40):  # a block of the whole chunk, or more, is full recompute
        assert parts(_block_memory(n, recompute=recompute)) == full
    assert _block_memory(7, recompute=Recompute.full) == _block_memory(
        None, recompute=Recompute.full
    )  # full already recomputes every layer: the block changes nothing, nor is echoed


def test_cli_prices_block_recompute_memory_and_explains_it(cli):
    args = ("layout", "-m", "llama3-8b", "--tp", "1", "--dp", "8", "--seq", "8192",
            "--microbatches", "16", "--zero", "1", "--recompute", "none")  # fmt: skip

    def memory(*extra):
        rows = json.loads(cli(*args, *extra, "-f", "json").out)
        return next(r["memory_bytes_per_rank"] for r in rows if "memory_bytes_per_rank" in r)

    assert memory("--recompute-layers", "32") == memory("--recompute", "full")
    assert memory("--recompute-layers", "32") < memory("--recompute-layers", "5") < memory()
    text = cli(*args, "--recompute-layers", "5", "--explain").out
    assert "the first N layers of each chunk at full recompute" in text
    assert "recompute_method 'block'" in text


def test_block_recompute_with_full_recompute_is_refused_saying_what_to_type(cli):
    # Megatron spells block recompute as full granularity + block method; here --recompute
    # full means every layer, so the pair would silently drop the block: one line says so
    r = cli("layout", "-m", "llama3-8b", "--tp", "1", "--dp", "8", "--recompute", "full",
            "--recompute-layers", "5")  # fmt: skip
    assert r.code != 0 and r.out == ""
    (line,) = r.err.strip().splitlines()
    assert "--recompute-layers 5" in line and "--recompute none --recompute-layers 5" in line
    ok = cli("layout", "-m", "llama3-8b", "--tp", "1", "--dp", "8", "--recompute", "none",
             "--recompute-layers", "5", "-f", "json")  # fmt: skip
    assert ok.code == 0 and json.loads(ok.out)
