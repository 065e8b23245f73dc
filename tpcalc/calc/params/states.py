"""Model states: the bytes per parameter that weights, gradients and the optimizer keep.

Two recipes are in use and the sources disagree, so the recipe is an explicit option
(``StateRecipe``) and every result echoes it:

- ``zero16``: bf16 weights 2 + bf16 gradients 2 + fp32 master weights, Adam m and v 4 + 4 + 4
  = 16 bytes/param (Rajbhandari et al. 2020, "ZeRO", §3.1: 2Ψ + 2Ψ + KΨ with K = 12; seed 000's
  444.5 GB, seed 003's 1,128.9 GB).
- ``megatron18``: bf16 weights 2 + fp32 main gradients 4 + fp32 master, m, v 12 = 18 bytes/param
  (Megatron-LM docs, "Distributed optimizer": bf16 params with fp32 grads, 18 bytes/param without
  the distributed optimizer, 6 + 12/d with it).

FP8 primary weights (Megatron ``--fp8-param-gather``, Transformer Engine ``fp8_model_init``) are
stored as each FP8 format and GPU keep them (``WeightStorage``, ``weight_storage``): per-tensor
FP8 is 1 byte, plus a 1-byte transpose on GPUs whose FP8 GEMMs take only the TN layout
(Hopper); MXFP8 keeps a rowwise and a columnwise copy with an E8M0 scale per 32 elements each.
A recipe prices every parameter it is given this way; Megatron keeps the embedding, output
layer, norms and router in BF16 (only Transformer Engine modules built under fp8_model_init
hold FP8 weights), which a rank-level count of those parameters would add back.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.choices import Fp8Format, StateRecipe
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec
from tpcalc.units import Dtype

# Adam keeps two moments per parameter (Kingma & Ba 2015): m and v.
ADAM_MOMENTS = 2

ZERO_SOURCE = "Rajbhandari et al. 2020 (ZeRO) §3.1: 2Ψ + 2Ψ + 12Ψ with mixed-precision Adam"
MEGATRON_SOURCE = (
    "Megatron-LM docs, distributed optimizer: bf16 params + fp32 grads = 18 bytes/param"
)


# Transformer Engine at the versions the Megatron-Bridge performance runs used (25.11:
# release_v2.9 @ 70f5366; 26.02.01: 2877704; 26.04.01: release_v2.16 @ c9877be), every fact
# the same in all three; line numbers in that order.
TE_VERSIONS = "Transformer Engine release_v2.9 (70f5366) / 2877704 / release_v2.16 (c9877be)"
TE_PRIMARY_WEIGHT = (
    "transformer_engine/pytorch/module/base.py TransformerEngineBaseModule.reset_parameters "
    "(lines 1288 / 1278 / 1658): an FP8 primary weight is quantized with "
    "set_usage(rowwise=True, columnwise=torch.is_grad_enabled()), i.e. both usages in training; "
    "get_weight_workspace returns it as is and does not drop a usage"
)
TE_NON_TN = (
    "transformer_engine/common/transformer_engine.cpp nvte_is_non_tn_fp8_gemm_supported "
    "(lines 725-726 / 1137-1138 / 1129-1130) and pytorch/utils.py is_non_tn_fp8_gemm_supported "
    "(495 / 496 / 559): true for compute capability 10.0-11.x and >= 13.0 only"
)
TE_FLOAT8 = (
    "transformer_engine/pytorch/csrc/quantizer.cpp Float8Quantizer::create_tensor and "
    "Float8CurrentScalingQuantizer::create_tensor (lines 137, 340 / 139, 342 / 299, 606): "
    "uint8 data, plus a uint8 transpose when columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported"
    "; pytorch/tensor/storage/float8_tensor_storage.py Float8TensorStorage.update_usage "
    "(needs_data_transpose = False on non-TN GPUs, line 209 / 225 / 247); "
    "pytorch/tensor/utils.py post_all_gather_processing re-creates the transpose after each "
    "distributed-optimizer all-gather on TN-only GPUs (2877704 line 616, c9877be line 956); "
    "tensor/float8_tensor.py Float8Tensor._reset_caches (after the optimizer's cast, lines 524 "
    "/ 593 / 517) marks the transpose stale without freeing it"
)
TE_MXFP8 = (
    "transformer_engine/pytorch/csrc/quantizer.cpp MXFP8Quantizer::create_tensor (lines 905 / "
    "860 / 1371): uint8 rowwise and columnwise data, each with a uint8 (E8M0) scale_inv; "
    "MXFP8Quantizer::get_scale_shape (1124-1130 / 1086-1092 / 1714-1720): one scale per "
    "MXFP8_BLOCK_SIZE = 32 elements (line 48 / 48 / 128), padded to 128 x 4 tiles; "
    "post_all_gather_processing: nothing to do for MXFP8Tensor"
)
MCORE_FP8_PARAMS = (
    "Megatron-LM 92c8482 / 9ed8b0c / 4415119: the DDP parameter buffer of an FP8 parameter is "
    "uint8 (distributed/distributed_data_parallel.py line 167 / 146; param_and_grad_buffer.py "
    "line 818 @ 4415119) and holds its FP8 data (fp8_utils.modify_underlying_storage): no BF16 "
    "copy; the distributed optimizer's FP32 main params are made from the FP8 weights "
    "(optimizer/distrib_optimizer.py lines 381-392 @ 92c8482), already in the 12 optimizer "
    "bytes; with reuse_grad_buf_for_mxfp8_param_ag the BF16 all-gather runs in the gradient "
    "buffer (param_and_grad_buffer.py lines 729, 767 @ 92c8482; 945, 988 @ 9ed8b0c) and is "
    "copied into the MXFP8 weight"
)
# One FP8 element is one byte (E4M3 / E5M2); the per-tensor FP32 scale is one number per tensor.
FP8_ELEMENT_BYTES = 1
# MXFP8: one E8M0 (1-byte) scale per 32 elements (OCP Microscaling spec v1.0 §5.3; TE
# MXFP8_BLOCK_SIZE above); Transformer Engine keeps a rowwise and a columnwise copy.
MXFP8_BLOCK_ELEMENTS = 32
E8M0_SCALE_BYTES = 1
MXFP8_COPIES = 2
# Per-tensor FP8 on a TN-only GPU: the data and its transpose.
TRANSPOSE_COPIES = 2


class WeightStorage(Struct, frozen=True):
    """How one FP8 weight is stored during training: copies of the FP8 elements and the
    scale bytes each copy adds per element (scale padding to whole tiles left out)."""

    name: str
    copies: int
    scale_bytes_per_element: float
    source: str
    # Bytes per parameter the distributed optimizer's parameter all-gather moves: the FP8 data
    # (uint8 buffer; the transpose is made after it), or BF16 for MXFP8 (gathered in the
    # gradient buffer, MCORE_FP8_PARAMS); tpcalc.calc.dp.zero prices the all-gather with it.
    gather_bytes: int

    @property
    def bytes_per_param(self) -> float:
        """copies × (1 FP8 byte + its scale share)."""
        return self.copies * (FP8_ELEMENT_BYTES + self.scale_bytes_per_element)


FP8_DATA = WeightStorage(
    "per-tensor FP8, data only (GPUs with non-TN FP8 GEMMs: Blackwell)", 1, 0.0,
    f"{TE_VERSIONS}: {TE_FLOAT8}; {TE_NON_TN}", FP8_ELEMENT_BYTES,
)  # fmt: skip
FP8_TRANSPOSE = WeightStorage(
    "per-tensor FP8, data + transpose (TN-only FP8 GEMMs: Hopper)", TRANSPOSE_COPIES, 0.0,
    f"{TE_VERSIONS}: {TE_PRIMARY_WEIGHT}; {TE_FLOAT8}; {TE_NON_TN}", FP8_ELEMENT_BYTES,
)  # fmt: skip
MXFP8_BOTH = WeightStorage(
    "MXFP8, rowwise + columnwise with E8M0 scales per 32", MXFP8_COPIES,
    E8M0_SCALE_BYTES / MXFP8_BLOCK_ELEMENTS,
    f"{TE_VERSIONS}: {TE_PRIMARY_WEIGHT}; {TE_MXFP8}", Dtype.bf16.bytes,
)  # fmt: skip


class StateBytes(Struct, frozen=True):
    """Bytes per parameter of each model-state part under one recipe."""

    weight_dtype: Dtype
    grad_dtype: Dtype
    master_dtype: Dtype | None  # None: no separate master copy (the weights are the master)
    moment_dtype: Dtype
    source: str
    # How the weights are stored when that is not one element of weight_dtype (FP8 weights
    # with a transpose or block scales); None: bytes(weight_dtype).
    weight_storage: WeightStorage | None = None

    @property
    def weight_bytes(self) -> float:
        """Bytes a stored weight holds: its storage's, else bytes(weight dtype) (an int)."""
        if self.weight_storage is not None:
            return self.weight_storage.bytes_per_param
        return self.weight_dtype.bytes

    @property
    def weight_gather_bytes(self) -> int:
        """Bytes per parameter a parameter all-gather moves (the storage's, else the weight
        dtype's)."""
        if self.weight_storage is not None:
            return self.weight_storage.gather_bytes
        return self.weight_dtype.bytes

    @property
    def grad_bytes(self) -> int:
        return self.grad_dtype.bytes

    @property
    def optimizer_bytes(self) -> int:
        """Master copy (none when the weights are the master) + Adam's two moments (ZeRO's
        K = 12 with fp32 master and moments)."""
        master = self.master_dtype.bytes if self.master_dtype is not None else 0
        return master + ADAM_MOMENTS * self.moment_dtype.bytes

    @property
    def total_bytes(self) -> float:
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
APEX_BF16_SOURCE = (
    "Apex DistributedFusedAdam with dtype and grad_sync_dtype bf16 "
    "(apex/contrib/optimizers/distributed_fused_adam.py: 'dtype: datatype for optimizer "
    "state', StateBucket's exp_avg_shard and exp_avg_sq_shard in it, _init_grad_buffer's "
    "buffer in grad_sync_dtype), as NeMo builds it from optim.dtype / optim.grad_sync_dtype "
    "with store_params=False when the optimizer dtype is the model's (NVIDIA/NeMo "
    "megatron_base_model.py setup_optimization @ 8e3d65d, the 24.07 performance-summary "
    "commit, lines 791-809; NeMo-Framework-Launcher nemotron_340b.yaml @ 8325688d, tag "
    "24.07, lines 158-162): BF16 weights, gradients and moments, no separate master copy"
)
FP8_PARAMS_SOURCE = (
    "Megatron-LM --fp8-param-gather (Transformer Engine FP8 parameters): the model keeps FP8 "
    "weights and the distributed optimizer FP32 main params"
)
FP32_GRADS_SOURCE = "FP32 grads"
BF16_GRADS_SOURCE = (
    "BF16 grads: grad_reduce_in_fp32 = False (Megatron-Bridge scripts/performance configs, e.g. "
    "llama/llama31_llm_pretrain.py set_llama31_common_configs @ cfeddcd, lines 42-43)"
)


def _fp8_params(storage: WeightStorage, grads: Dtype) -> StateBytes:
    """FP8 weights stored as ``storage`` says, ``grads`` gradients, FP32 master and moments."""
    grads_src = FP32_GRADS_SOURCE if grads is Dtype.fp32 else BF16_GRADS_SOURCE
    return StateBytes(
        Dtype.fp8, grads, Dtype.fp32, Dtype.fp32,
        f"{FP8_PARAMS_SOURCE}, {storage.bytes_per_param:g} B each: {storage.name} "
        f"({storage.source}); {MCORE_FP8_PARAMS}; {grads_src}",
        weight_storage=storage,
    )  # fmt: skip


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
    StateRecipe.bf16_states: StateBytes(Dtype.bf16, Dtype.bf16, None, Dtype.bf16, APEX_BF16_SOURCE),
    # 1 B weights: per-tensor FP8 without a transpose (Blackwell; FP8_DATA); on Hopper use
    # fp8-params-transpose, with MXFP8 mxfp8-params (weight_storage).
    StateRecipe.fp8_params: StateBytes(
        Dtype.fp8,
        Dtype.fp32,
        Dtype.fp32,
        Dtype.fp32,
        f"{FP8_PARAMS_SOURCE} (1 B: {FP8_DATA.name}); {FP32_GRADS_SOURCE}",
    ),  # fmt: skip
    StateRecipe.fp8_params_bf16_moments: StateBytes(
        Dtype.fp8,
        Dtype.fp32,
        Dtype.fp32,
        Dtype.bf16,
        f"{FP8_PARAMS_SOURCE} (1 B: {FP8_DATA.name}); {FP32_GRADS_SOURCE}; "
        f"{PRECISION_AWARE_SOURCE}",
    ),
    StateRecipe.fp8_params_transpose: _fp8_params(FP8_TRANSPOSE, Dtype.fp32),
    StateRecipe.mxfp8_params: _fp8_params(MXFP8_BOTH, Dtype.fp32),
    StateRecipe.fp8_params_bf16_grads: _fp8_params(FP8_DATA, Dtype.bf16),
    StateRecipe.fp8_params_transpose_bf16_grads: _fp8_params(FP8_TRANSPOSE, Dtype.bf16),
    StateRecipe.mxfp8_params_bf16_grads: _fp8_params(MXFP8_BOTH, Dtype.bf16),
}


# Transformer Engine's gates (pytorch/quantization.py check_fp8_support, check_mxfp8_support @
# release_v2.9 lines 47-67): FP8 from 8.9, MXFP8 on 10.0 up to (not including) 12.0.
FP8_MIN_CAPABILITY = (8, 9)
MXFP8_CAPABILITIES = ((10, 0), (12, 0))
# nvte_is_non_tn_fp8_gemm_supported (TE_NON_TN): [10.0, 12.0) or >= 13.0.
NON_TN_CAPABILITIES = (((10, 0), (12, 0)), ((13, 0), (99, 0)))


def compute_capability(hw: HardwareSpec) -> tuple[int, int]:
    """The card's compute capability (its config's ``compute_capability``, sourced)."""
    if hw.compute_capability is None:
        raise InputError(
            f"hardware {hw.name}: FP8 weight storage needs its compute capability; add "
            'compute_capability: {value: "9.0", source: ...} to its config (see '
            "configs/hardware/h100-sxm.yaml)"
        )
    return hw.compute_capability.major_minor


def non_tn_fp8_gemm(capability: tuple[int, int]) -> bool:
    """Whether FP8 GEMMs take non-TN layouts on this GPU (Transformer Engine's rule, TE_NON_TN):
    then no FP8 transpose is kept."""
    return any(lo <= capability < hi for lo, hi in NON_TN_CAPABILITIES)


def weight_storage(fmt: Fp8Format, hw: HardwareSpec) -> WeightStorage:
    """How Transformer Engine stores an FP8 primary weight of format ``fmt`` on ``hw``
    during training: per-tensor FP8 keeps its transpose on TN-only GPUs (Hopper) and not on
    Blackwell; MXFP8 keeps both copies with their scales (sources: each ``WeightStorage``)."""
    cc = compute_capability(hw)
    hardware = hw.name
    if cc < FP8_MIN_CAPABILITY:
        raise InputError(
            f"hardware={hardware!r} (compute capability {cc[0]}.{cc[1]}) has no FP8: Transformer "
            f"Engine needs {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or higher"
        )
    if fmt is Fp8Format.mxfp8:
        lo, hi = MXFP8_CAPABILITIES
        if not lo <= cc < hi:
            raise InputError(
                f"fp8 format mxfp8 on hardware={hardware!r} (compute capability "
                f"{cc[0]}.{cc[1]}): Transformer Engine runs MXFP8 on {lo[0]}.{lo[1]} up to "
                f"{hi[0]}.{hi[1]} (Blackwell); valid format there: per-tensor"
            )
        return MXFP8_BOTH
    return FP8_DATA if non_tn_fp8_gemm(cc) else FP8_TRANSPOSE


# The recipe of each storage, FP32 or BF16 gradients (FP32 master weights and moments).
FP8_PARAM_RECIPES: dict[tuple[str, Dtype], StateRecipe] = {
    (FP8_DATA.name, Dtype.fp32): StateRecipe.fp8_params,
    (FP8_TRANSPOSE.name, Dtype.fp32): StateRecipe.fp8_params_transpose,
    (MXFP8_BOTH.name, Dtype.fp32): StateRecipe.mxfp8_params,
    (FP8_DATA.name, Dtype.bf16): StateRecipe.fp8_params_bf16_grads,
    (FP8_TRANSPOSE.name, Dtype.bf16): StateRecipe.fp8_params_transpose_bf16_grads,
    (MXFP8_BOTH.name, Dtype.bf16): StateRecipe.mxfp8_params_bf16_grads,
}


def fp8_params_recipe(fmt: Fp8Format, hw: HardwareSpec, grads: Dtype = Dtype.fp32) -> StateRecipe:
    """The state recipe of FP8 primary weights of format ``fmt`` on ``hw`` with
    ``grads`` gradients (bf16 or fp32), FP32 master weights and Adam moments."""
    if grads not in (Dtype.fp32, Dtype.bf16):
        raise InputError(f"grads={grads.value}: FP8-parameter recipes keep fp32 or bf16 grads")
    return FP8_PARAM_RECIPES[(weight_storage(fmt, hw).name, grads)]


# Transformer Engine / Megatron-Bridge names of the FP8 recipes (MixedPrecisionConfig.fp8_recipe)
# and the storage format each one gives a weight: "delayed" and "tensorwise" (current scaling)
# make per-tensor Float8Tensor weights, "mxfp8" MXFP8Tensor weights.
FP8_RECIPE_FORMATS: dict[str, Fp8Format] = {
    "delayed": Fp8Format.per_tensor,
    "tensorwise": Fp8Format.per_tensor,
    "mxfp8": Fp8Format.mxfp8,
}


def fp8_format(fp8_recipe: str) -> Fp8Format:
    """The weight format of a Megatron ``fp8_recipe`` name (``FP8_RECIPE_FORMATS``)."""
    if fp8_recipe not in FP8_RECIPE_FORMATS:
        valid = ", ".join(FP8_RECIPE_FORMATS)
        raise InputError(
            f"fp8_recipe={fp8_recipe!r} has no FP8 weight storage here; valid: {valid}"
        )
    return FP8_RECIPE_FORMATS[fp8_recipe]


def with_fp8_params(recipe: StateRecipe, fmt: Fp8Format, hw: HardwareSpec) -> StateRecipe:
    """``recipe`` with its weights kept as FP8 primary weights of format ``fmt`` on
    ``hw`` (``fp8_params_recipe``): its gradients stay; it must keep FP32 master weights
    and Adam moments (zero16, megatron18 or an FP8-parameter recipe)."""
    rb = recipe_bytes(recipe)
    if rb.master_dtype is not Dtype.fp32 or rb.moment_dtype is not Dtype.fp32:
        raise InputError(
            f"state recipe {recipe.value}: FP8 parameters are priced with FP32 master weights "
            "and moments only; valid: zero16, megatron18"
        )
    return fp8_params_recipe(fmt, hw, rb.grad_dtype)


def _fp8_storage(rb: StateBytes) -> WeightStorage:
    """The storage an FP8-weight recipe prices: its own, or per-tensor data only (1 B)."""
    return rb.weight_storage or FP8_DATA


def fp8_storage_note(recipe: StateRecipe, hw: HardwareSpec) -> str | None:
    """Why ``recipe``'s FP8 weights are not what Transformer Engine keeps on ``hw``
    (``weight_storage``), and the recipe that prices what it keeps; None when they are, when
    the recipe keeps no FP8 weights or when the card states no compute capability. The 1-byte
    recipes without a named storage (fp8-params, fp8-params-bf16-moments) are per-tensor FP8,
    data only."""
    rb = recipe_bytes(recipe)
    if rb.weight_dtype is not Dtype.fp8 or hw.compute_capability is None:
        return None
    priced = _fp8_storage(rb)
    fmt = Fp8Format.mxfp8 if priced is MXFP8_BOTH else Fp8Format.per_tensor
    try:
        kept = weight_storage(fmt, hw)
    except InputError as exc:
        return f"--state-recipe {recipe.value}: {exc}"
    if kept is priced:
        return None
    note = (
        f"--state-recipe {recipe.value} prices {priced.bytes_per_param:g} B per weight "
        f"({priced.name}); on {hw.name} Transformer Engine keeps {kept.bytes_per_param:g} B "
        f"({kept.name})"
    )
    rest = (rb.grad_dtype, rb.master_dtype, rb.moment_dtype)
    same = [
        r for r, b in RECIPES.items()
        if b.weight_dtype is Dtype.fp8 and _fp8_storage(b) is kept
        and (b.grad_dtype, b.master_dtype, b.moment_dtype) == rest
    ]  # fmt: skip
    return f"{note}: --state-recipe {same[0].value} prices that" if same else note


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
    weight_bytes_per_param: float
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
    bytes_per_param: float
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
