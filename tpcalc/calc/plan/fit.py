"""Per-rank memory of many candidates at once, with the arithmetic of
``calc.layout.memory.rank_memory`` (the numbers ``tpcalc layout`` judges fit by), from cached
pieces:

- activations per layer kind depend on (tp, cp, micro-batch, SP, recompute) only: the exact
  model's saved-tensor inventory (``activations.exact.layer.saved_tensors``) is built once per
  (tp, cp, SP, granularity) at micro-batch 1 and 2; every tensor's shape holds the micro-batch
  at most once as a factor, so its bytes are affine in b and the other sizes follow
  (checked against ``layer_activation_bytes`` in tests/test_plan_engine.py). A recompute
  module set keeps the tensors none of its modules drops (``techniques.apply_techniques`` drops
  a tensor when any one module does), so every set is a sum over one inventory;
- in-flight chunks and layers per rank depend on (pp, schedule, vpp, microbatches) only
  (``pipeline.in_flight_chunks``, ``chunk_layer_counts``);
- parameters per rank on (pp, vpp, DualPipe or not) (``layout.memory.pp_rank_params``), and
  their states on (tp, ep, etp, ZeRO, dp·cp) (``dp.zero.zero_states_bytes``, linear in params).

Sums of whole bytes are exact in float64 and every product is taken in the order rank_memory
takes it, so the screen and rank_memory agree to the last bit (tests compare them).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np
from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.activations.exact.layer import (
    ONE_SITE_PER_TENSOR,
    head_tensors,
    layer_kind,
    mtp_input_tensors,
    saved_tensors,
)
from tpcalc.calc.activations.exact.techniques import apply_techniques
from tpcalc.calc.dp.zero import ZeroStage, state_divisors
from tpcalc.calc.layout.groups import MemoryTechniques, ParallelLayout
from tpcalc.calc.layout.memory import (
    activation_options,
    buffer_bytes,
    layer_activation_bytes,
    pp_rank_params,
)
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.calc.pipeline.schedule import (
    chunk_layer_counts,
    in_flight_chunks,
    rank_chunks,
    rank_layers,
)
from tpcalc.calc.plan.space import ModeKeys, RecomputeMode, Shape, Variant
from tpcalc.choices import ActivationModel, Recompute, Schedule, StateRecipe
from tpcalc.specs import ModelSpec
from tpcalc.units import Dtype

# The activations of the last few (tp, cp, pp) units (``_group_act``) kept, up to this many
# bytes: the search visits a unit's groups in a row, but the top-k and Pareto passes restore
# groups a child dropped (``search._Search.restore``) in the order of their bounds, jumping
# between units (DeepSeek-V3 on 2,048 H800: 639 restores over 30 units, 3-10 MB each).
ACT_CACHE_BYTES = 64e6
# the last stage's loss heads and MTP modules' inputs, kinds of their own (``head_tensors``,
# ``mtp_input_tensors``)
HEAD_KIND, MTP_INPUT_KIND = "head", "mtp_input"
AFFINE_POINTS = (1, 2)  # micro-batch sizes the inventory is built at (affine in b)


class Pipe(Struct, frozen=True):
    """One (pp, schedule, vpp, microbatches): per rank the layers of each kind it holds (two
    terms for DualPipe, one stage per direction) with their in-flight factors."""

    counts: tuple[np.ndarray, ...]  # each [ranks, kinds]: layer counts (MTP on the last chunk)
    factors: tuple[np.ndarray, ...]  # each [ranks]: in-flight chunks / v (DualPipe: p−r, r+1)
    last: np.ndarray  # [ranks] bool: holds the last chunk (logits buffer)
    offload_share: np.ndarray  # [ranks]: share of the rank's decoder layers offloaded
    layer_counts: tuple[np.ndarray, ...]  # as counts, the decoder layers alone (what offloads)


class _PipeRows(NamedTuple):
    """``pipe`` of many variants over many micro-batch counts: the one-direction variants
    stacked (their indices, layer counts per rank transposed [V1, K, ranks], in-flight factors
    [V1, M, ranks], offloaded shares [V1, ranks], the decoder layers' counts alone transposed
    [V1, K, ranks]), the DualPipe ones apart (index, counts and factors per direction, share,
    the decoder layers' counts per direction), and which ranks hold the last chunk [V, ranks]."""

    one: np.ndarray
    counts_t: np.ndarray
    factors: np.ndarray
    share: np.ndarray
    layer_counts_t: np.ndarray
    dual: list[
        tuple[int, tuple[np.ndarray, ...], tuple[np.ndarray, ...], np.ndarray,
              tuple[np.ndarray, ...]]
    ]  # fmt: skip
    last: np.ndarray
    present: np.ndarray  # [V, K, ranks] 1.0 where the rank runs a layer of the kind, else 0.0


_WorkingTerms = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class MemoryScreen:
    """Worst-rank memory of blocks of candidates (module docstring)."""

    def __init__(
        self, spec: ModelSpec, *, seq: int, recipe: StateRecipe, activations: ActivationModel,
        techniques: MemoryTechniques, gpus_per_node: int,
    ) -> None:  # fmt: skip
        self.spec, self.seq, self.recipe, self.model = spec, seq, recipe, activations
        self.tech, self.node = techniques, gpus_per_node
        n = spec.num_hidden_layers
        if activations is ActivationModel.exact:
            names = [layer_kind(spec, i) for i in range(n)]
        else:
            names = ["layer"] * n  # the paper model: one per-layer figure for every layer
        self.kinds = list(dict.fromkeys(names))
        self.kind_of = [self.kinds.index(k) for k in names]
        self.first = [self.kind_of.index(k) for k in range(len(self.kinds))]
        self.mtp = spec.mtp_layers if techniques.mtp else 0
        # the exact model's loss heads (``head_tensors``) and MTP modules' inputs
        # (``mtp_input_tensors``) as kinds of their own on the last chunk, (1 + MTP modules)
        # and MTP modules of them, as ``rank_memory`` adds them (the paper model has none)
        self.head: int | None = None
        self.mtp_input: int | None = None
        if activations is ActivationModel.exact:
            self.head = len(self.kinds)
            self.kinds.append(HEAD_KIND)
            if self.mtp:
                self.mtp_input = len(self.kinds)
                self.kinds.append(MTP_INPUT_KIND)
        self._inventory: dict[tuple, tuple[np.ndarray, np.ndarray, tuple[str, ...]]] = {}
        self._kind_bytes: dict[tuple, np.ndarray] = {}
        self._mode_bytes: dict[tuple, np.ndarray] = {}
        self._working: dict[tuple, np.ndarray] = {}
        self._working_parts: dict[tuple, _WorkingTerms] = {}
        self._plain = (RecomputeMode(Recompute.none),)  # one object: ModeKeys keys it by id
        self._mode_key = ModeKeys()
        self._modes_seen: tuple[list | None, tuple] = (None, ())
        self._pipes: dict[tuple, Pipe] = {}
        self._pipe_rows: dict[tuple, _PipeRows] = {}
        self._rank_rows: dict[tuple, tuple] = {}
        self._kept: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._params: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._buffers: dict[tuple, float] = {}
        self._rank_params: dict[tuple, list] = {}
        self._buffer_rows: dict[tuple, np.ndarray] = {}
        self._buffer_cols: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._state_factors: dict[tuple, float] = {}
        self._factors: dict[tuple, tuple[np.ndarray, ...]] = {}
        none = np.zeros(0)
        self._last_act: tuple[Any, Any, Any, Any] = (
            None, (none, none), (none, none, none), (none, none),
        )  # fmt: skip
        self._acts: OrderedDict[tuple, tuple[Any, Any, Any, Any]] = OrderedDict()
        self._acts_bytes = 0  # the arrays' bytes of the entries in ``_acts``
        rb = recipe_bytes(recipe)
        self._rb = (rb.weight_bytes, rb.grad_bytes, rb.optimizer_bytes)

    # ---- activations per layer kind ----

    def _records(self, tp: int, cp: int, sp: bool, grain: Recompute, b: int) -> list[list]:
        layout = ParallelLayout(gpus_per_node=self.node, tp=tp, cp=cp)
        # every technique of the run but its recompute modules (the inventory's masks apply them)
        tech = replace(self.tech, recompute_modules=())
        opts = activation_options(layout, sp=sp, recompute=grain, techniques=tech)
        out = [saved_tensors(self.spec, i, self.seq, b, opts) for i in self.first]
        # no recompute mode or module reaches the heads or the MTP inputs
        if self.head is not None:
            out.append(head_tensors(self.spec, self.seq, b, opts))
        if self.mtp_input is not None:
            out.append(mtp_input_tensors(self.spec, self.seq, b, opts))
        return out

    def _module_inventory(
        self, tp: int, cp: int, sp: bool, grain: Recompute
    ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
        """Per tensor of every kind: bytes at b = 1 and 2, and the modules that drop it."""
        key = (tp, cp, sp, grain)
        if key not in self._inventory:
            modules = tuple(m for m in _MODULES)
            at = [self._records(tp, cp, sp, grain, b) for b in AFFINE_POINTS]
            rows, drops = [], []
            for k, records in enumerate(at[0]):
                mla = self.kinds[k].startswith("mla")
                for j, r in enumerate(records):
                    rows.append((k, r.bytes, at[1][k][j].bytes))
                    mask = 0
                    layer = k not in (self.head, self.mtp_input)
                    for bit, m in enumerate(modules if layer else ()):
                        kept = apply_techniques(
                            [r], modules=frozenset((m,)), fp8_cache=False, probs_in_act=False,
                            mla=mla,
                        )  # fmt: skip
                        if not kept:
                            mask |= 1 << bit
                    drops.append(mask)
            self._inventory[key] = (np.array(rows, dtype=np.int64), np.array(drops), modules)
        return self._inventory[key]

    def kind_bytes(self, tp: int, cp: int, sp: bool, mode: RecomputeMode, b: int) -> np.ndarray:
        """Activation bytes of one layer of each kind for one micro-batch of b sequences."""
        sp = sp and tp > 1
        key = (tp, cp, sp, mode, b)
        if key in self._kind_bytes:
            return self._kind_bytes[key]
        if self.model is ActivationModel.paper:
            layout = ParallelLayout(gpus_per_node=self.node, tp=tp, cp=cp)
            per = layer_activation_bytes(
                self.spec, layout, seq=self.seq, micro_batch=b, sp=sp, recompute=mode.recompute,
                model=self.model, techniques=self._techniques(mode),
            )  # fmt: skip
            out = np.array([per[0]], dtype=np.float64)
        else:
            # Megatron: recompute_modules replace selective's default (saved_tensors does the same)
            grain = Recompute.none if mode.modules else mode.recompute
            rows, drops, modules = self._module_inventory(tp, cp, sp, grain)
            mask = sum(1 << modules.index(m) for m in mode.modules)
            kept = (drops & mask) == 0
            one, two = rows[:, 1], rows[:, 2]
            each = one + (b - 1) * (two - one)  # affine in b (module docstring)
            out = np.zeros(len(self.kinds), dtype=np.float64)
            np.add.at(out, rows[kept, 0], each[kept])
        self._kind_bytes[key] = out
        return out

    def mode_bytes(
        self, tp: int, cp: int, sps: tuple[bool, ...], modes: tuple[RecomputeMode, ...], b: int
    ) -> np.ndarray:
        """``kind_bytes`` of every (sp, mode): [S, R', K]."""
        # modes by a small int: hashing every mode record per lookup was the cost (profile)
        token = self._mode_key(modes)
        key = (tp, cp, sps, token, b)
        if key not in self._mode_bytes:
            self._mode_bytes[key] = np.array(
                [self._modes_bytes(tp, cp, sp, modes, b) for sp in sps]
            )
        return self._mode_bytes[key]

    def _modes_bytes(
        self, tp: int, cp: int, sp: bool, modes: tuple[RecomputeMode, ...], b: int
    ) -> np.ndarray:
        """``kind_bytes`` of every mode, [R', K]: under the exact model, per inventory (one per
        granularity) the kept tensors of every mode at once, summed per kind as whole numbers
        (int64, exact), as ``kind_bytes`` sums them."""
        if self.model is ActivationModel.paper:
            return np.array([self.kind_bytes(tp, cp, sp, mode, b) for mode in modes])
        at_one, slope = self._kept_sums(tp, cp, sp and tp > 1, modes)
        return (at_one + (b - 1) * slope).astype(np.float64)  # affine in b, int64: exact

    def _kept_sums(
        self, tp: int, cp: int, sp: bool, modes: tuple[RecomputeMode, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per mode and kind [R', K], the bytes of the tensors it keeps at b = 1 and their
        growth per sequence (int64), from the inventory of its granularity (Megatron:
        recompute_modules replace selective's default, as ``kind_bytes``): ``kind_bytes`` =
        at_one + (b − 1) · slope."""
        key = (tp, cp, sp, self._mode_key(modes))
        got = self._kept.get(key)
        if got is None:
            at_one = np.empty((len(modes), len(self.kinds)), dtype=np.int64)
            slope = np.empty_like(at_one)
            by_grain: dict[Recompute, list[int]] = {}
            for i, mode in enumerate(modes):
                grain = Recompute.none if mode.modules else mode.recompute
                by_grain.setdefault(grain, []).append(i)
            for grain, ix in by_grain.items():
                rows, drops, names = self._module_inventory(tp, cp, sp, grain)
                masks = np.array(
                    [sum(1 << names.index(m) for m in modes[i].modules) for i in ix],
                    dtype=np.int64,
                )
                kept = (drops[None, :] & masks[:, None]) == 0  # [R_g, T]
                one, two = rows[:, 1], rows[:, 2]
                onehot = np.zeros((len(rows), len(self.kinds)), dtype=np.int64)
                onehot[np.arange(len(rows)), rows[:, 0]] = 1
                at_one[ix] = (kept * one) @ onehot
                slope[ix] = (kept * (two - one)) @ onehot
            got = self._kept[key] = (at_one, slope)
        return got

    def mode_working(
        self, tp: int, cp: int, sps: tuple[bool, ...], modes: tuple[RecomputeMode, ...], b: int
    ) -> np.ndarray:
        """The recompute working set of one layer of each kind per (sp, mode), [S, R', K]
        (``layout.memory.layer_working_bytes``): the largest recompute site's tensors. Whole
        layers (full) and core attention (selective): the kept bytes without recompute less
        the mode's; modules: each module's dropped tensors of the inventory (one norm at a
        time for ``layernorm``), the largest. Sums and maxima of whole bytes: exact."""
        token = self._mode_key(modes)
        key = (tp, cp, sps, token, b)
        got = self._working.get(key)
        if got is None:
            got = self._working[key] = np.array(
                [self._modes_working(tp, cp, sp and tp > 1, modes, b) for sp in sps]
            )
        return got

    def _modes_working(
        self, tp: int, cp: int, sp: bool, modes: tuple[RecomputeMode, ...], b: int
    ) -> np.ndarray:
        """``mode_working`` of one sp: [R', K]; 0 under the paper model (``rank_memory``).
        Every term is affine in b (``_working_terms``); sums and maxima of whole bytes."""
        if self.model is ActivationModel.paper:
            return np.zeros((len(modes), len(self.kinds)))
        lin_one, lin_slope, site_one, site_slope, mask = self._working_terms(tp, cp, sp, modes)
        out = lin_one + (b - 1) * lin_slope  # whole layers and core attention
        if mask.any():  # the largest of each mode's module sites
            sites = site_one + (b - 1) * site_slope  # [N, K]
            np.maximum(out, (sites[None] * mask[:, :, None]).max(axis=1), out=out)
        return out.astype(np.float64)

    def _working_terms(
        self, tp: int, cp: int, sp: bool, modes: tuple[RecomputeMode, ...]
    ) -> _WorkingTerms:
        """What ``_modes_working`` evaluates at b, as whole bytes at b = 1 and growth per
        sequence (int64): per mode and kind [R', K] the plain layer's kept bytes less the
        mode's (full and selective; 0 with modules); every module site [N, K] of the plain
        inventory (a module's dropped tensors per kind, or one tensor each for
        ``ONE_SITE_PER_TENSOR``); and which sites each mode recomputes [R', N]."""
        key = (tp, cp, sp, self._mode_key(modes))
        got = self._working_parts.get(key)
        if got is not None:
            return got
        plain_one, plain_slope = self._kept_sums(tp, cp, sp, self._plain)
        at_one, slope = self._kept_sums(tp, cp, sp, modes)
        whole = np.array([not m.modules and m.recompute is not Recompute.none for m in modes])
        lin_one = np.where(whole[:, None], plain_one - at_one, 0)
        lin_slope = np.where(whole[:, None], plain_slope - slope, 0)
        rows, drops, names = self._module_inventory(tp, cp, sp, Recompute.none)
        one, grow = rows[:, 1], rows[:, 2] - rows[:, 1]
        n_k = len(self.kinds)
        site_one, site_slope, site_module = [], [], []
        for bit, m in enumerate(names):
            (sel,) = np.nonzero((drops >> bit) & 1)
            groups = [[t] for t in sel] if m in ONE_SITE_PER_TENSOR else [list(sel)]
            for tensors in groups:
                a, g = np.zeros(n_k, dtype=np.int64), np.zeros(n_k, dtype=np.int64)
                np.add.at(a, rows[tensors, 0], one[tensors])
                np.add.at(g, rows[tensors, 0], grow[tensors])
                site_one.append(a)
                site_slope.append(g)
                site_module.append(m)
        mask = np.array(
            [[m in mode.modules for m in site_module] for mode in modes], dtype=np.int64
        ).reshape(len(modes), len(site_module))
        got = self._working_parts[key] = (
            lin_one, lin_slope,
            np.array(site_one, dtype=np.int64).reshape(-1, n_k),
            np.array(site_slope, dtype=np.int64).reshape(-1, n_k),
            mask,
        )  # fmt: skip
        return got

    @staticmethod
    def rank_working(working: np.ndarray, present: np.ndarray) -> np.ndarray:
        """Each rank's recompute working set: the largest of ``working`` [..., K] over the
        kinds the rank runs, ``present`` [K, ranks] (0 where it runs none): [..., ranks]. A
        product by 1.0 or 0.0 and a maximum are exact."""
        return (working[..., :, None] * present).max(axis=-2)

    def _techniques(self, mode: RecomputeMode) -> MemoryTechniques:
        """The run's techniques, every one kept, with this mode's recompute modules."""
        return replace(self.tech, recompute_modules=mode.modules)

    def techniques(self, mode: RecomputeMode) -> MemoryTechniques:
        """The run's memory techniques with this recompute mode's modules."""
        return self._techniques(mode)

    # ---- pipeline shape ----

    def pipe(self, pp: int, v: Variant, m: int) -> Pipe:
        key = (pp, v, m)
        if key in self._pipes:
            return self._pipes[key]
        counts, last, share, layers = self._ranks(pp, v)
        out = Pipe(counts, self._factors_of(pp, v, m), last, share, layers)
        self._pipes[key] = out
        return out

    def _factors_of(self, pp: int, v: Variant, m: int) -> tuple[np.ndarray, ...]:
        """In-flight chunks / v of each rank (DualPipe: p − r and r + 1 per direction)."""
        key = (pp, v, m)
        got = self._factors.get(key)
        if got is not None:
            return got
        if v.schedule is Schedule.dualpipe:
            got = (
                np.array([pp - r for r in range(pp)], dtype=np.float64),
                np.array([r + 1 for r in range(pp)], dtype=np.float64),
            )
        else:
            got = (
                np.array(
                    [in_flight_chunks(v.schedule, pp, m, v.vpp, r) / v.vpp for r in range(pp)]
                ),
            )
        self._factors[key] = got
        return got

    def _ranks(self, pp: int, v: Variant) -> tuple[
        tuple[np.ndarray, ...], np.ndarray, np.ndarray, tuple[np.ndarray, ...]
    ]:  # fmt: skip
        """``pipe``'s parts that do not depend on the micro-batch count: the layers of each
        kind per rank (per direction), which ranks hold the last chunk, the offloaded share of
        the decoder layers, and those layers' counts alone (no MTP module, loss head or MTP
        input: ``rank_memory`` offloads none of them)."""
        key = (pp, v)
        got = self._rank_rows.get(key)
        if got is not None:
            return got
        n, k = self.spec.num_hidden_layers, len(self.kinds)
        chunks = chunk_layer_counts(n, pp * v.vpp)
        layer_chunk = np.zeros((len(chunks), k), dtype=np.int64)
        start = 0
        for c, size in enumerate(chunks):
            for i in range(start, start + size):
                layer_chunk[c, self.kind_of[i]] += 1
            start += size
        per_chunk = layer_chunk.copy()
        per_chunk[-1, self.kind_of[n - 1]] += self.mtp
        if self.head is not None:
            per_chunk[-1, self.head] += 1 + self.mtp
        if self.mtp_input is not None:
            per_chunk[-1, self.mtp_input] += self.mtp
        counts: tuple[np.ndarray, ...]
        layers: tuple[np.ndarray, ...]
        if v.schedule is Schedule.dualpipe:  # one stage per direction
            counts = (per_chunk[:pp], per_chunk[::-1][:pp])
            layers = (layer_chunk[:pp], layer_chunk[::-1][:pp])
            last = np.array([r in (0, pp - 1) for r in range(pp)])
        else:
            held_chunks = [rank_chunks(pp, v.vpp, r) for r in range(pp)]
            counts = (np.array([per_chunk[c].sum(axis=0) for c in held_chunks]),)
            layers = (np.array([layer_chunk[c].sum(axis=0) for c in held_chunks]),)
            last = np.array([(pp * v.vpp - 1) in c for c in held_chunks])
        share = np.zeros(pp)
        if self.tech.offload_layers:
            for r, held in enumerate(rank_layers(n, pp, v.vpp)):
                if held:
                    share[r] = min(self.tech.offload_layers, len(held)) / len(held)
        got = self._rank_rows[key] = (counts, last, share, layers)
        return got

    def _pipes_of(self, pp: int, vs: list[Variant], ms: tuple[int, ...]) -> _PipeRows:
        """``pipe`` of every variant over the micro-batch counts ``ms`` (``_PipeRows``); shared
        by every shape with this pp and these counts."""
        key = (pp, tuple(vs), ms)
        got = self._pipe_rows.get(key)
        if got is None:
            one, dual, counts_t, factors, shares, layers_t = [], [], [], [], [], []
            last = np.empty((len(vs), pp), dtype=bool)
            for i, v in enumerate(vs):
                counts, last[i], share, layers = self._ranks(pp, v)
                row = [self._factors_of(pp, v, m) for m in ms]
                f = tuple(np.array([x[t] for x in row]) for t in range(len(row[0])))
                if len(counts) == 1:
                    one.append(i)
                    counts_t.append(counts[0].T.astype(np.float64))
                    factors.append(f[0])
                    shares.append(share)
                    layers_t.append(layers[0].T.astype(np.float64))
                else:
                    dual.append((i, counts, f, share, layers))
            n_k, n_m = len(self.kinds), len(ms)
            present = np.zeros((len(vs), n_k, pp))
            for i, v in enumerate(vs):
                present[i] = (np.stack(self._ranks(pp, v)[0]).sum(axis=0) > 0).T
            got = _PipeRows(
                np.array(one, dtype=np.int64),
                np.array(counts_t).reshape(len(one), n_k, pp),
                np.array(factors).reshape(len(one), n_m, pp),
                np.array(shares).reshape(len(one), pp),
                np.array(layers_t).reshape(len(one), n_k, pp), dual, last, present,
            )  # fmt: skip
            self._pipe_rows[key] = got
        return got

    # ---- parameters and states ----

    def params(self, shape: Shape, v: Variant) -> tuple[np.ndarray, np.ndarray]:
        """(dense, expert) parameters of each pipeline rank after the TP and EP splits."""
        key = (shape.pp, v.vpp, v.schedule is Schedule.dualpipe, shape.tp, shape.ep * shape.etp)
        if key not in self._params:
            sched = Schedule.dualpipe if key[2] else Schedule.one_f_one_b
            rkey = (shape.pp, v.vpp, key[2])  # the split before TP and EP: shared by all
            if rkey not in self._rank_params:
                self._rank_params[rkey] = pp_rank_params(
                    self.spec, shape.pp, v.vpp, sched, mtp=self.tech.mtp
                )
            ranks = self._rank_params[rkey]
            d = np.array([-(-dense // shape.tp) + whole for dense, whole, _ in ranks], np.float64)
            e = np.array([-(-x // (shape.etp * shape.ep)) for _, _, x in ranks], np.float64)
            self._params[key] = (d, e, np.zeros(0))
        d, e, _ = self._params[key]
        return d, e

    def state_factor(self, zero: ZeroStage, n: int) -> float:
        """Bytes of model states per parameter at ``zero`` over n ranks (zero_states_bytes)."""
        key = (zero, n)
        if key not in self._state_factors:
            dw, dg, do = state_divisors(zero, n)
            w, g, o = self._rb
            self._state_factors[key] = w / dw + g / dg + o / do
        return self._state_factors[key]

    def buffer(self, shape: Shape, b: int, last: bool) -> float:
        key = (shape.tp, shape.cp, shape.ep, b, last)
        if key not in self._buffers:
            layout = ParallelLayout(
                gpus_per_node=self.node, tp=shape.tp, cp=shape.cp, ep=shape.ep, etp=shape.etp
            )
            self._buffers[key] = buffer_bytes(
                self.spec, layout, seq=self.seq, micro_batch=b, last=last, techniques=self.tech,
                act_bytes=Dtype.bf16.bytes,
            )  # fmt: skip
        return self._buffers[key]

    def _buffers_of(self, shape: Shape, mbs: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """``buffer`` of every micro-batch of ``mbs``, on a rank with the last chunk and on
        one without, [1, M, 1] each; shared by every etp of a (tp, cp, ep), and by every pp
        with the same micro-batches (``buffer`` reads neither etp nor pp)."""
        key = (shape.tp, shape.cp, shape.ep, tuple(mbs))
        got = self._buffer_cols.get(key)
        if got is None:
            on = np.array([self.buffer(shape, b, True) for b in mbs])[None, :, None]
            off = np.array([self.buffer(shape, b, False) for b in mbs])[None, :, None]
            got = self._buffer_cols[key] = (on, off)
        return got

    # ---- a block ----

    def block(
        self, shape: Shape, v: Variant, mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], zeros: list[ZeroStage],
    ) -> np.ndarray:  # fmt: skip
        """Worst-rank memory, bytes, of every (zero, micro-batch, sp, mode): [Z, M, S, R]."""
        d, e = self.params(shape, v)
        grad, expert_dp = (
            shape.dp * shape.cp,
            shape.dp * shape.cp * shape.tp // (shape.ep * shape.etp),
        )
        states = np.stack(
            [d * self.state_factor(z, grad) + e * self.state_factor(z, expert_dp) for z in zeros]
        )  # [Z, ranks]
        out = np.empty((len(zeros), len(mbs), len(sps), len(modes)))
        if self._modes_seen[0] is not modes:  # one tuple per list the search passes
            self._modes_seen = (modes, tuple(modes))
        ctuple, stuple = self._modes_seen[1], tuple(sps)
        for i, b in enumerate(mbs):
            pipe = self.pipe(shape.pp, v, per_dp // b)
            kb = self.mode_bytes(shape.tp, shape.cp, stuple, ctuple, b)  # [S, R', K]
            act = _held(kb, pipe.counts, pipe.factors)  # [S, R', ranks]
            if self.tech.offload_layers:  # the decoder layers' share (rank_memory)
                act = act - _held(kb, pipe.layer_counts, pipe.factors) * pipe.offload_share
            present = (np.stack(pipe.counts).sum(axis=0) > 0).T.astype(np.float64)  # [K, ranks]
            wk = self.mode_working(shape.tp, shape.cp, stuple, ctuple, b)  # [S, R', K]
            act = act + self.rank_working(wk, present)
            bkey = (shape.tp, shape.cp, shape.ep, shape.etp, b, shape.pp, v)
            if bkey not in self._buffer_rows:
                self._buffer_rows[bkey] = np.array(
                    [self.buffer(shape, b, bool(x)) for x in pipe.last]
                )
            buf = self._buffer_rows[bkey]
            total = states[:, None, None, :] + act[None] + buf
            out[:, i] = total.max(axis=-1)
        return out

    def group(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], zeros: list[ZeroStage],
    ) -> np.ndarray:  # fmt: skip
        """``block`` of every variant of ``vs`` over the micro-batches ``mbs`` at once:
        [V, Z, M, S, R] (the same sums and products, broadcast; every activation sum is a sum
        of whole bytes, exact in any order)."""
        states, act, buf, ix = self._group_terms(shape, vs, mbs, per_dp, sps, modes, zeros)
        n_v, n_m, n_sr = act.shape[:3]
        v_ix = np.arange(n_v)
        # The most loaded rank, one kept rank at a time: a running maximum over [V, Z, M, S·R]
        # instead of one [V, Z, M, S·R, ranks] sum reduced over its short last axis (many
        # times slower). Each element is still (states + activations) + buffers, as the
        # broadcast sum took it, and a maximum is exact: the same value, bit for bit.
        out = np.empty((n_v, len(zeros), n_m, n_sr))
        tmp = np.empty_like(out)
        for j in range(ix.shape[1]):
            r = ix[:, j]
            dst = out if j == 0 else tmp
            np.add(states[v_ix, :, r][:, :, None, None], act[v_ix, :, :, r][:, None], out=dst)
            np.add(dst, buf[v_ix, :, r][:, None, :, None], out=dst)
            if j:
                np.maximum(out, tmp, out=out)
        return out.reshape(n_v, len(zeros), n_m, len(sps), len(modes))

    def group_slabs(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], zeros: list[ZeroStage], capacity: float,
        allowed: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, float]:  # fmt: skip
        """``group`` as slabs: which (variant, ZeRO stage, micro-batch) slabs may hold a cell
        that fits, [V, Z, M] (only where ``allowed`` [V, M]), and their (sp, mode) cells
        [slabs, S·R], slabs in C order; every slab left out has each of its entries above
        ``capacity``, so the entries at most ``capacity`` are ``group``'s, all there. The
        memory of a whole group is never built (``search._Group.mem`` builds a listed
        block's group). Third, the least floor of the allowed slabs: no entry of the group
        is below it (inf when none is allowed).

        A slab's floor is the most loaded rank of the sums at each rank's least activations
        over the (sp, mode) cells: every cell's memory at a rank is (states + activations) +
        buffers with activations at least that least, float sums are monotone, and the worst
        rank is at least any one rank, so no cell of a slab whose floor is above ``capacity``
        fits. The slabs kept are summed as ``group`` sums them (the same additions per
        element, the first of them commuted, which is exact, and the same maximum over the
        same kept ranks), so they are ``group``'s values bit for bit
        (``test_memory_screen_slabs_are_group_where_it_fits``). DeepSeek-V3 on 256 H800: the
        floors keep exactly the slabs where something fits, 56% of the (variant,
        micro-batch) slabs at ZeRO-3, 22% at ZeRO-2, 12% at ZeRO-1, 2.5% without ZeRO."""
        states, act, buf, ix = self._group_terms(shape, vs, mbs, per_dp, sps, modes, zeros)
        act_t, least = self._last_act[3]  # [V, ranks, M, S·R] and [V, M, ranks] (_group_act)
        # the floor at the kept ranks only: a rank left out has states, buffers and every
        # activation (so its least) at most a kept rank's, so its floor is at most that
        # rank's and the most loaded is the same value
        rows = np.arange(len(vs))[:, None]
        floor = states[rows, :, ix][..., None] + least[rows, :, ix][:, :, None]  # [V, W, Z, M]
        floor += buf[rows, :, ix][:, :, None]
        slab = floor.max(axis=1)  # [V, Z, M]: each slab's floor
        live = (slab <= capacity) & allowed[:, None, :]
        lowest = float(np.where(allowed[:, None, :], slab, math.inf).min(initial=math.inf))
        vi, zi, mi = np.nonzero(live)
        acc = np.empty((len(vi), act.shape[2]))
        for j in range(ix.shape[1]):
            r = ix[vi, j]
            x = act_t[vi, r, mi]  # [slabs, S·R], a copy
            x += states[vi, zi, r][:, None]  # (states + activations): + is commutative
            x += buf[vi, mi, r][:, None]
            if j:
                np.maximum(acc, x, out=acc)
            else:
                acc = x
        return live, acc, lowest

    def _group_terms(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], zeros: list[ZeroStage],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """What ``group`` sums: the states [V, Z, ranks], activations [V, M, S·R, ranks] and
        buffers [V, M, ranks] of every rank, and per variant the ranks that can be the most
        loaded [V, width] (padded with a repeat)."""
        pp, n_v = shape.pp, len(vs)
        grad = shape.dp * shape.cp
        expert_dp = shape.dp * shape.cp * shape.tp // (shape.ep * shape.etp)
        de = [self.params(shape, v) for v in vs]
        d = np.array([x[0] for x in de])[:, None, :]  # [V, 1, ranks]
        e = np.array([x[1] for x in de])[:, None, :]
        fd = np.array([self.state_factor(z, grad) for z in zeros])[None, :, None]  # [1, Z, 1]
        fe = np.array([self.state_factor(z, expert_dp) for z in zeros])[None, :, None]
        states = d * fd + e * fe  # [V, Z, ranks], each element as block takes it
        act, last = self._group_act(shape, vs, mbs, per_dp, sps, modes)  # [V, M, S·R, ranks]
        on, off = self._buffers_of(shape, mbs)
        buf = np.where(last[:, None, :], on, off)  # [V, M, ranks]
        # Only ranks no other rank dominates can be the most loaded: a rank whose states,
        # activations and buffers are each at most another's is never above it (float sums
        # are monotone). Each rank is checked against the one before it and against the rank
        # with the most activations (never left out); every rank left out is then at most a
        # kept one (the comparisons point to a lower index or to that rank: no cycle).
        top, below_top, below_prev = self._last_act[2]  # the activations' part (_group_act)
        v_ix = np.arange(n_v)
        dominated = (
            below_top
            & (states <= states[v_ix, :, top][:, :, None]).all(axis=1)
            & (buf <= buf[v_ix, :, top][:, :, None]).all(axis=1)
        )  # [V, ranks]
        dominated[:, 1:] |= (
            below_prev
            & (states[..., 1:] <= states[..., :-1]).all(axis=1)
            & (buf[..., 1:] <= buf[..., :-1]).all(axis=1)
        )
        dominated[v_ix, top] = False
        keep = ~dominated
        width = int(keep.sum(axis=1).max())
        if width < pp:
            # each variant's kept ranks, padded with its top rank (a repeat leaves the max)
            order = np.argsort(~keep, axis=1, kind="stable")[:, :width]
            ix = np.where(np.take_along_axis(keep, order, axis=1), order, top[:, None])
        else:
            ix = np.broadcast_to(np.arange(pp), (n_v, pp))
        return states, act, buf, ix

    def _group_act(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode],
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Activation bytes of every (variant, micro-batch, sp·mode, rank) [V, M, S·R, ranks]
        and which ranks hold the last chunk [V, ranks]: the same for every ep and etp of a
        (tp, cp, pp), so the last one is kept (the search visits them in a row), with the
        activations' part of ``group``'s rank dominance."""
        key = (shape.tp, shape.cp, shape.pp, tuple(vs), tuple(mbs), per_dp, tuple(sps),
               self._mode_key(modes))  # fmt: skip
        if self._last_act[0] == key:
            return self._last_act[1]
        if key in self._acts:  # a unit seen a few units ago
            self._acts.move_to_end(key)
            self._last_act = self._acts[key]
            return self._last_act[1]
        pp = shape.pp
        if self._modes_seen[0] is not modes:
            self._modes_seen = (modes, tuple(modes))
        ctuple, stuple = self._modes_seen[1], tuple(sps)
        kb = np.array([self.mode_bytes(shape.tp, shape.cp, stuple, ctuple, b) for b in mbs])
        n_m, n_s, n_r, n_k = kb.shape
        kb = kb.reshape(n_m, n_s * n_r, n_k)  # [M, S·R, K]
        act = np.empty((len(vs), n_m, n_s * n_r, pp))
        rows = self._pipes_of(pp, vs, tuple(per_dp // b for b in mbs))
        last = rows.last
        if len(rows.one):  # every one-direction variant in one product (whole bytes: exact)

            def one_way(counts_t: np.ndarray) -> np.ndarray:
                return rows.factors[:, :, None, :] * np.matmul(kb[None], counts_t[:, None])

            a = one_way(rows.counts_t)
            if self.tech.offload_layers:  # the decoder layers' share (rank_memory)
                a = a - one_way(rows.layer_counts_t) * rows.share[:, None, None, :]
            act[rows.one] = a
        for i, counts, factors, share, layers in rows.dual:
            m_factors = tuple(f[:, None, :] for f in factors)  # [M, 1, ranks] per direction
            a = _held(kb, counts, m_factors)
            if self.tech.offload_layers:
                a = a - _held(kb, layers, m_factors) * share
            act[i] = a
        # one layer's recompute rebuilt in backward, on every rank (``rank_working``)
        wk = np.array([self.mode_working(shape.tp, shape.cp, stuple, ctuple, b) for b in mbs])
        if wk.any():  # [M, S·R, K] against each variant's [V, 1, 1, K, ranks]
            act += self.rank_working(wk.reshape(n_m, n_s * n_r, n_k), rows.present[:, None, None])
        top = act.sum(axis=(1, 2)).argmax(axis=1)  # [V]: the rank with the most activations
        below_top = (act <= act[np.arange(len(vs)), :, :, top][..., None]).all(axis=(1, 2))
        below_prev = (act[..., 1:] <= act[..., :-1]).all(axis=(1, 2))
        # for ``group_slabs``: each (variant, rank)'s [M, S·R] contiguous, and each rank's least
        # activations over the (sp, mode) cells
        act_t = np.ascontiguousarray(act.transpose(0, 3, 1, 2))
        self._last_act = (
            key, (act, last), (top, below_top, below_prev), (act_t, act.min(axis=2)),
        )  # fmt: skip
        self._keep_act(key)
        return act, last

    def _keep_act(self, key: tuple) -> None:
        """Keep ``_last_act`` under ``key``, the oldest left out past ``ACT_CACHE_BYTES``."""
        self._acts[key] = self._last_act
        self._acts_bytes += _nbytes(self._last_act)
        while self._acts_bytes > ACT_CACHE_BYTES and len(self._acts) > 1:
            _, old = self._acts.popitem(last=False)
            self._acts_bytes -= _nbytes(old)


def _held(
    kb: np.ndarray, counts: tuple[np.ndarray, ...], factors: tuple[np.ndarray, ...]
) -> np.ndarray:
    """In-flight activations of every rank, [..., ranks]: each direction's per-kind bytes
    ``kb`` [..., K] times its layer counts [ranks, K], by its in-flight factors, summed
    (DualPipe's second direction after the first: ``rank_activation_bytes``' order)."""
    act = factors[0] * (kb @ counts[0].T)
    for c, f in zip(counts[1:], factors[1:], strict=True):
        act = act + f * (kb @ c.T)
    return act


def _nbytes(entry: tuple) -> int:
    """The bytes of the arrays in a ``_last_act`` entry (its key first)."""
    return sum(a.nbytes for part in entry[1:] for a in part)


_MODULES = (
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
)  # fmt: skip
