"""The memory screen's slabs (``fit.MemoryScreen.group_slabs``) against the whole memory
(``MemoryScreen.group``, itself checked against ``block`` and ``rank_memory`` in
tests/test_plan_engine.py), bit for bit where an entry fits, and the search's counts and cells
from them against the same counts taken on the whole memory."""

from __future__ import annotations

import numpy as np
import pytest

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import MemoryTechniques
from tpcalc.calc.plan import search as S
from tpcalc.calc.plan.request import build_request
from tpcalc.calc.plan.space import RecomputeMode, Shape, Variant
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute, Schedule

MODES = [
    RecomputeMode(Recompute.none), RecomputeMode(Recompute.selective),
    RecomputeMode(Recompute.selective, ("layernorm",)), RecomputeMode(Recompute.full),
]  # fmt: skip
VARIANTS = [
    Variant(Schedule.one_f_one_b, 1), Variant(Schedule.interleaved, 2),
    Variant(Schedule.zb_h1, 1), Variant(Schedule.dualpipe, 1),
]  # fmt: skip


def _whole(live: np.ndarray, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The slabs as a whole [V, Z, M, S, R] array, inf in the slabs left out."""
    out = np.full((*live.shape, values.shape[1]), np.inf)
    out[live] = values
    return out.reshape(shape)


@pytest.mark.parametrize(
    ("model", "offload"), [("deepseek-v3", 0), ("deepseek-v3", 1), ("llama3-8b", 0)]
)
def test_memory_screen_slabs_are_group_where_it_fits(model, offload):
    """Every entry of ``group`` at most the capacity, micro-batch allowed, is in a slab kept
    with the same float; every other entry of a kept slab is above the capacity; no slab is
    kept where its micro-batch is not allowed. Capacities at quantiles of the group's memory,
    so that slabs are both kept and left out at each ZeRO stage."""
    spec, hw = load_model(model), load_hardware("h800")
    req = build_request(
        spec, hw, gpus=256, seq=4096, global_batch=512,
        memory=MemoryTechniques(offload_layers=offload),
    )  # fmt: skip
    s = S._Search(req, req.gpus)
    zeros, sps, mbs, per_dp = list(ZeroStage), [True, False], [1, 2, 4], 32
    ep = 16 if spec.is_moe else 1
    rng = np.random.default_rng(11)
    left_out = kept = 0
    for tp, pp in ((1, 4), (2, 8), (4, 2)):
        shape = Shape(tp=tp, cp=1, pp=pp, dp=256 // (tp * pp), ep=ep, etp=1)
        whole = s.screen.group(shape, VARIANTS, mbs, per_dp, sps, MODES, zeros)
        for q in (0.05, 0.3, 0.6, 0.95):
            capacity = float(np.quantile(whole, q))
            allowed = rng.random((len(VARIANTS), len(mbs))) < 0.8
            live, values, floor = s.screen.group_slabs(
                shape, VARIANTS, mbs, per_dp, sps, MODES, zeros, capacity, allowed
            )  # fmt: skip
            got = _whole(live, values, whole.shape)
            fits = (whole <= capacity) & allowed[:, None, :, None, None]
            assert np.array_equal(got[fits], whole[fits]), (shape, q)
            assert (got[~fits & (got != np.inf)] > capacity).all(), (shape, q)
            assert not (live & ~allowed[:, None, :]).any()
            # the slabs left out: none holds an entry that fits
            assert not fits.any(axis=(3, 4))[~live].any()
            # the floor: no allowed entry below it, and the least one not far above (the least
            # activations of each rank over the (sp, mode) cells: a bound, not always an entry)
            least = whole[np.broadcast_to(allowed[:, None, :, None, None], whole.shape)].min()
            assert floor <= least < floor * 1.5, (shape, q, floor, least)
            left_out += int((~live).sum())
            kept += int(live.sum())
    assert left_out and kept


def _counts_from_whole(s: S._Search) -> tuple[int, int]:
    """Candidates that fit and those rejected for memory, taken again on every group's whole
    memory (``MemoryScreen.group``); each group's memory as the searches read it and its kept
    cells' least memory checked against it on the way."""
    fitting = over = 0
    for grp in s.groups:
        whole = s.screen.group(
            grp.shape, grp.variants, grp.mbs, grp.per_dp, grp.sps, s.d.recompute, s.zeros
        )  # fmt: skip
        allowed = grp.allowed[:, None, :, None, None]
        fitting += int(((whole <= s.capacity) & allowed).sum())
        over += int(((whole > s.capacity) & allowed).sum())
        # the group's memory as the search reads it (``_Group.mem``, restored first where a
        # child dropped it): the same where it fits
        s.restore(grp)
        mem = grp.mem()
        fits = (whole <= s.capacity) & allowed
        assert np.array_equal(mem[fits], whole[fits]), grp.shape
        assert (mem[~fits] > s.capacity).all(), grp.shape
        # a kept cell's memory is the least over the timed stages that fit of a cell of its
        # variant (``_Search._cells``)
        least = np.where(fits[:, s.zi], whole[:, s.zi], np.inf).min(axis=1)
        if grp.cells is not None:
            for v, m in zip(grp.cells[0], grp.cells[1], strict=True):
                assert m in least[v], (grp.shape, v, m)
    return fitting, over


@pytest.mark.parametrize(
    ("model", "gpus", "batch", "pins"),
    [
        ("llama3-8b", 16, 32, {"recompute": ("none", "selective", "full")}),
        ("qwen3-30b-a3b", 16, 32, {"recompute": ("selective", "full")}),
        ("deepseek-v3", 256, 64, {"recompute": ("full",), "zero": (3, 1), "pp": (8, 16)}),
    ],
)
def test_search_counts_from_slabs_are_the_whole_memorys(model, gpus, batch, pins):
    """The search's feasible count and memory rejections (taken from the slabs, groups with
    nothing that fits dropped) equal the counts over every group's whole memory, groups with
    nothing that fits included (their candidates all rejected for memory); each group's
    memory as the searches read it is the whole memory where it fits."""
    req = build_request(
        load_model(model), load_hardware("h100-sxm"), gpus=gpus, seq=4096, global_batch=batch,
        pins=pins,
    )  # fmt: skip
    s = S._Search(req, req.gpus)
    s.enumerate()
    fitting, over = _counts_from_whole(s)
    assert s.fitting == fitting > 0
    # groups with nothing that fits are not kept: their candidates are memory rejections too
    assert s.rejections[S.MEMORY] >= over > 0
    assert s.enumerated - s.fitting == sum(s.rejections.values())
