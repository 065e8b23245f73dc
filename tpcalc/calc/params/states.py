"""Model states: the bytes per parameter that weights, gradients and the optimizer keep.

Two recipes are in use and the sources disagree, so the recipe is an explicit option
(``StateRecipe``) and every result echoes it:

- ``zero16``: bf16 weights 2 + bf16 gradients 2 + fp32 master weights, Adam m and v 4 + 4 + 4
  = 16 bytes/param (Rajbhandari et al. 2020, "ZeRO", §3.1: 2Ψ + 2Ψ + KΨ with K = 12; seed 000's
  444.5 GB, seed 003's 1,128.9 GB).
- ``megatron18``: bf16 weights 2 + fp32 main gradients 4 + fp32 master, m, v 12 = 18 bytes/param
  (Megatron-LM docs, "Distributed optimizer": bf16 params with fp32 grads, 18 bytes/param without
  the distributed optimizer, 6 + 12/d with it).
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.choices import StateRecipe
from tpcalc.errors import InputError
from tpcalc.units import Dtype

# Adam keeps two moments per parameter (Kingma & Ba 2015): m and v.
ADAM_MOMENTS = 2

ZERO_SOURCE = "Rajbhandari et al. 2020 (ZeRO) §3.1: 2Ψ + 2Ψ + 12Ψ with mixed-precision Adam"
MEGATRON_SOURCE = (
    "Megatron-LM docs, distributed optimizer: bf16 params + fp32 grads = 18 bytes/param"
)


class StateBytes(Struct, frozen=True):
    """Bytes per parameter of each model-state part under one recipe."""

    weight_dtype: Dtype
    grad_dtype: Dtype
    master_dtype: Dtype
    moment_dtype: Dtype
    source: str

    @property
    def weight_bytes(self) -> int:
        return self.weight_dtype.bytes

    @property
    def grad_bytes(self) -> int:
        return self.grad_dtype.bytes

    @property
    def optimizer_bytes(self) -> int:
        """fp32 master copy + Adam's two moments (ZeRO's K = 12)."""
        return self.master_dtype.bytes + ADAM_MOMENTS * self.moment_dtype.bytes

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes


PRECISION_AWARE_SOURCE = (
    "Megatron-LM --use-precision-aware-optimizer (TE FusedAdam): --exp-avg-dtype and "
    "--exp-avg-sq-dtype bf16 keep Adam m, v in BF16 with FP32 main params and grads; "
    "DeepSeek-V3 report §3.3.3 "
    "(BF16 moments, FP32 master weights and gradients)"
)
PRECISION_AWARE_GRADS_SOURCE = (
    "Megatron-LM --use-precision-aware-optimizer --main-grads-dtype bf16 --exp-avg-dtype bf16 "
    "--exp-avg-sq-dtype bf16: BF16 weights, grads and moments, FP32 main params"
)
FP8_PARAMS_SOURCE = (
    "Megatron-LM --fp8-param-gather (Transformer Engine FP8 parameters): the model keeps FP8 "
    "weights (1 B) and the distributed optimizer FP32 main params; FP32 grads"
)

RECIPES: dict[StateRecipe, StateBytes] = {
    StateRecipe.zero16: StateBytes(Dtype.bf16, Dtype.bf16, Dtype.fp32, Dtype.fp32, ZERO_SOURCE),
    StateRecipe.megatron18: StateBytes(
        Dtype.bf16, Dtype.fp32, Dtype.fp32, Dtype.fp32, MEGATRON_SOURCE
    ),
    StateRecipe.bf16_moments: StateBytes(
        Dtype.bf16, Dtype.fp32, Dtype.fp32, Dtype.bf16, PRECISION_AWARE_SOURCE
    ),
    StateRecipe.bf16_grads_moments: StateBytes(
        Dtype.bf16, Dtype.bf16, Dtype.fp32, Dtype.bf16, PRECISION_AWARE_GRADS_SOURCE
    ),
    StateRecipe.fp8_params: StateBytes(
        Dtype.fp8, Dtype.fp32, Dtype.fp32, Dtype.fp32, FP8_PARAMS_SOURCE
    ),
    StateRecipe.fp8_params_bf16_moments: StateBytes(
        Dtype.fp8,
        Dtype.fp32,
        Dtype.fp32,
        Dtype.bf16,
        f"{FP8_PARAMS_SOURCE}; {PRECISION_AWARE_SOURCE}",
    ),
}


def recipe_bytes(recipe: StateRecipe) -> StateBytes:
    """The per-parameter byte counts of ``recipe``."""
    return RECIPES[recipe]


def check_params(params: int, what: str = "params") -> None:
    """Raise InputError unless a parameter count is zero or positive."""
    if params < 0:
        raise InputError(f"{what}={params} must be zero or positive")


def model_states_bytes(params: int, recipe: StateRecipe, *, shards: int = 1) -> float:
    """Model states of ``params`` parameters, bytes, split evenly over ``shards`` ranks.

    ``shards`` is a model-parallel split of the parameters (seed 003 §7.3: 1,128.9 GB ÷ t=8
    ≈ 141 GB, which treats every parameter as sharded by TP). Source: see ``StateRecipe``.
    """
    check_params(params)
    if shards < 1:
        raise InputError(f"shards={shards} must be a positive integer")
    return params * recipe_bytes(recipe).total_bytes / shards


class StateParts(Struct, frozen=True):
    """Weights, gradients and optimizer bytes per rank: N × bytes / d, each part with its own
    divisor d (t for a model-parallel split; ZeRO's stage divisors over DP)."""

    params: int
    weight_bytes_per_param: int
    grad_bytes_per_param: int
    optimizer_bytes_per_param: int
    weights_divisor: int
    grads_divisor: int
    optimizer_divisor: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float


def state_parts(params: int, rb: StateBytes, divisors: tuple[int, int, int]) -> StateParts:
    """N × weight/d_w, N × grad/d_g, N × optimizer/d_o bytes per rank."""
    dw, dg, do = divisors
    return StateParts(
        params=params,
        weight_bytes_per_param=rb.weight_bytes,
        grad_bytes_per_param=rb.grad_bytes,
        optimizer_bytes_per_param=rb.optimizer_bytes,
        weights_divisor=dw,
        grads_divisor=dg,
        optimizer_divisor=do,
        weights_bytes=params * rb.weight_bytes / dw,
        grads_bytes=params * rb.grad_bytes / dg,
        optimizer_bytes=params * rb.optimizer_bytes / do,
    )


class ModelStates(Struct, frozen=True):
    """Weights + gradients + optimizer of N parameters split evenly over ``shards`` ranks."""

    recipe: StateRecipe
    parts: StateParts
    shards: int
    bytes_per_param: int
    model_states_bytes: float


def model_states(params: int, recipe: StateRecipe, *, shards: int = 1) -> ModelStates:
    """N/shards × bytes_per_param, as three parts (source: the recipe, ``StateRecipe``)."""
    check_params(params)
    if shards < 1:
        raise InputError(f"shards={shards} must be a positive integer")
    rb = recipe_bytes(recipe)
    return ModelStates(
        recipe=recipe,
        parts=state_parts(params, rb, (shards, shards, shards)),
        shards=shards,
        bytes_per_param=rb.total_bytes,
        model_states_bytes=params * rb.total_bytes / shards,
    )
