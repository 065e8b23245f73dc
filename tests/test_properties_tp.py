"""Hypothesis properties of the TP calculators (design.md, "Independent checks")."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tpcalc.calc.activations.paper import FullRecomputeSharding, Recompute, paper_model_terms
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.params.states import StateRecipe
from tpcalc.calc.tp.comm import tp_comm_row
from tpcalc.catalog import load_hardware, load_model
from tpcalc.reports.memory import memory_row

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
    row = tp_comm_row(
        load_model(model),
        load_hardware("h100-sxm"),
        t=1,
        seq=s,
        micro_batch=b,
        recompute_full=recompute_full,
    )
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
def test_sp_moves_the_same_bytes_as_tp(model, s, b, t, recompute_full):
    spec, hw = load_model(model), load_hardware("h100-sxm")
    tp = tp_comm_row(spec, hw, t=t, seq=s, micro_batch=b, sp=False, recompute_full=recompute_full)
    sp = tp_comm_row(spec, hw, t=t, seq=s, micro_batch=b, sp=True, recompute_full=recompute_full)
    assert sp.value("send_bytes_per_step") == tp.value("send_bytes_per_step")
    # an all-reduce sends exactly one reduce-scatter plus one all-gather
    assert sp.value("send_bytes_per_allgather") + sp.value("send_bytes_per_reduce_scatter") == (
        tp.value("send_bytes_per_allreduce")
    )
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
        row = memory_row(
            spec,
            hw,
            t=t,
            seq=s,
            micro_batch=b,
            sp=sp,
            recompute=recompute,
            full_sharding=sharding,
            recipe=StateRecipe.zero16,
        )
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
def test_activation_parts_add_up(model, s, b, t, sp, recompute):
    terms = paper_model_terms(
        load_model(model), seq=s, micro_batch=b, t=t, sp=sp, recompute=recompute
    )
    parts = sum(x.value for x in terms if x.part_of == "activation_bytes_per_layer")
    per_layer = next(x.value for x in terms if x.key == "activation_bytes_per_layer")
    assert abs(parts - per_layer) <= 1e-9 * max(1.0, per_layer)
