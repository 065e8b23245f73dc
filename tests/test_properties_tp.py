"""Hypothesis properties of the TP calculators (design.md, "Independent checks")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from tpcalc.calc.activations.paper import paper_activations
from tpcalc.calc.activations.paper_explain import model_terms
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import FullRecomputeSharding, Recompute, StateRecipe
from tpcalc.reports.memory import memory_row
from tpcalc.reports.request import Workload
from tpcalc.reports.tp import tp_comm_row
from tpcalc.terms import Row

MODELS = ["qwen3.8", "llama3-8b", "llama3-70b", "llama3-405b"]
seqs = st.integers(min_value=1, max_value=262_144)
batches = st.integers(min_value=1, max_value=64)
group = st.integers(min_value=1, max_value=4096)


@given(n=group)
def test_all_reduce_is_reduce_scatter_plus_all_gather(n):
    assert ring_factor(Collective.all_reduce, n) == (
        ring_factor(Collective.reduce_scatter, n) + ring_factor(Collective.all_gather, n)
    )


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), s=seqs, b=batches, recompute_full=st.booleans())
def test_t1_moves_no_tp_bytes(model, s, b, recompute_full):
    work = Workload(
        spec=load_model(model),
        hw=load_hardware("h100-sxm"),
        seq=s,
        micro_batch=b,
        sp=False,
        recompute=Recompute.full if recompute_full else Recompute.none,
    )
    row = tp_comm_row(work, 1)
    assert row.value("send_bytes_per_step") == 0
    assert row.value("nvlink_time_s") == 0
    assert row.value("message_bytes_per_step") == 0


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    s=seqs,
    b=batches,
    t=st.sampled_from([2, 4, 8, 16]),
    recompute_full=st.booleans(),
)
def test_sp_pairs_add_up_to_the_step(model, s, b, t, recompute_full):
    # Korthikanti et al. 2022 §4.2.2: under SP each all-reduce becomes one all-gather and one
    # reduce-scatter. The SP row's per-collective bytes, times the collectives per layer and the
    # layers, must give the step total the TP row computes from the all-reduce (two different
    # ring factors, (t-1)/t twice against 2(t-1)/t once), and the SP row must name AG + RS.
    spec, hw = load_model(model), load_hardware("h100-sxm")
    recompute = Recompute.full if recompute_full else Recompute.none
    work = Workload(spec=spec, hw=hw, seq=s, micro_batch=b, sp=False, recompute=recompute)
    tp = tp_comm_row(work, t)
    sp = tp_comm_row(replace(work, sp=True), t)
    per_layer = 6 if recompute_full else 4  # 2 fwd + 2 bwd (+ 2 recomputed fwd): Shoeybi §3
    pair = sp.value("send_bytes_per_allgather") + sp.value("send_bytes_per_reduce_scatter")
    expected = pair * per_layer * spec.num_hidden_layers
    assert tp.value("send_bytes_per_step") == pytest.approx(expected, rel=1e-12)
    assert "AG + " in sp.value("collectives") and "AR" not in sp.value("collectives")
    assert "send_bytes_per_allreduce" not in {x.key for x in sp.terms}
    assert tp.check_breakdowns() == [] and sp.check_breakdowns() == []


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    s=st.integers(1, 4096).map(lambda k: 8 * k),  # SP needs t | s for t up to 8
    b=st.integers(1, 8),
    sp=st.booleans(),
    recompute=st.sampled_from(list(Recompute)),
    sharding=st.sampled_from(list(FullRecomputeSharding)),
)
def test_per_rank_memory_never_grows_with_t(model, s, b, sp, recompute, sharding):
    spec, hw = load_model(model), load_hardware("h100-sxm")
    previous = None
    for t in (1, 2, 4, 8):
        work = Workload(
            spec=spec,
            hw=hw,
            seq=s,
            micro_batch=b,
            sp=sp,
            recompute=recompute,
            recipe=StateRecipe.zero16,
        )
        row = memory_row(work, t, full_sharding=sharding)
        assert row.check_breakdowns() == []
        current = (
            row.value("activation_bytes"),
            row.value("model_states_bytes"),
            row.value("total_bytes_per_rank"),
        )
        if previous is not None:
            assert all(c <= p for c, p in zip(current, previous, strict=True))
        previous = current


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    s=seqs,
    b=batches,
    t=st.sampled_from([1, 2, 4, 8]),
    sp=st.booleans(),
    recompute=st.sampled_from(list(Recompute)),
)
def test_activation_per_layer_is_table_2(model, s, b, t, sp, recompute):
    # Korthikanti et al. 2022 Table 2, written out here independently of the calculator's parts:
    # TP sbh(10 + 24/t + 5as/(ht)), SP sbh/t(34 + 5as/h); selective recompute drops the 5as/h
    # scores; full recompute keeps the layer input 2sbh (the paper's sharding: not split).
    spec = load_model(model)
    act = paper_activations(spec, seq=s, micro_batch=b, t=t, sp=sp, recompute=recompute)
    terms = model_terms(act)
    row = Row(inputs={}, terms=terms)
    sbh, a, h = s * b * spec.hidden_size, spec.num_attention_heads, spec.hidden_size
    scores = 5 * a * s / h if recompute is Recompute.none else 0.0
    if recompute is Recompute.full:
        expected = 2 * sbh
    elif sp:
        expected = sbh / t * (34 + scores)
    else:
        expected = sbh * (10 + 24 / t + scores / t)
    assert row.value("activation_bytes_per_layer") == pytest.approx(expected, rel=1e-12)
    assert row.check_breakdowns() == []
