"""Tensor-parallel divisibility: which t a model admits, KV replication, vocab padding.

Sources:
- Megatron-LM ``megatron/core/utils.py::divide``: every split is an exact integer division
  (here ``tpcalc.errors.divide``, whose message names both numbers).
- Shoeybi et al. 2019 (arXiv 1909.08053) §3 and seed 003 §7.3.4/§7.3.7: attention is split by
  head, the MLP by its intermediate dimension; heads, KV heads, the intermediate size and the
  vocabulary must divide by t, or be padded or replicated.
- vLLM ``model_executor/layers/linear.py::QKVParallelLinear``: when t >= num_key_value_heads each
  rank holds one KV head and each KV head is replicated on t / n_kv ranks (``divide(tp_size,
  total_num_kv_heads)``); otherwise each rank holds n_kv / t. Seed 000 (GQA paragraph): Qwen3.8's
  4 KV heads at t=8 sit on 2 cards each; at t=4 exactly one per card.
- Megatron-LM ``megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding``: the vocab
  is padded up to a multiple of ``make_vocab_size_divisible_by * tensor_model_parallel_size``
  (default 128), so the vocabulary never blocks a t.
"""

from __future__ import annotations

from enum import Enum

from tpcalc.calc.params.counts import shared_expert_intermediate
from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
from tpcalc.errors import DivisibilityError, InputError, divisors
from tpcalc.specs import ModelSpec


class Split(str, Enum):
    """How one weight is laid out over the t ranks of a tensor-parallel group.

    Shapes follow seed 003 §7.3.4's ``X[s, h] × W[h, h']`` notation: a weight is [in, out].
    """

    column = "column"  # ColumnParallelLinear: the output (column) dimension is split
    row = "row"  # RowParallelLinear: the input (row) dimension is split
    vocab = "vocab"  # VocabParallelEmbedding / LM head: the (padded) vocabulary is split
    replicated = "replicated"  # every rank holds the whole weight (norms, routers, MLA down-proj)


def require_t(t: int, name: str = "t") -> None:
    """A tensor-parallel size must be a positive integer."""
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise InputError(f"{name}={t} must be a positive integer (e.g. 1, 2, 4 or 8)")


def split_sizes(spec: ModelSpec) -> tuple[tuple[str, int], ...]:
    """Every size that t must divide exactly, by its config name (seed 003 §7.3.7).

    The vocabulary is absent: it is padded (``padded_vocab``). KV heads are absent: they are
    split or replicated (``kv_problem``).
    """
    sizes: list[tuple[str, int]] = [("num_attention_heads", spec.num_attention_heads)]
    if spec.dense_layers:  # the MTP layer copies the last layer's FFN, so adds no new width
        sizes.append(("intermediate_size", spec.intermediate_size))
    if spec.moe_layers and spec.moe_intermediate_size is not None:
        sizes.append(("moe_intermediate_size", spec.moe_intermediate_size))
        shared = shared_expert_intermediate(spec)
        if shared:
            sizes.append(("shared expert intermediate", shared))
    if spec.linear_attention_layers:
        sizes.append(("linear_num_key_heads", spec.linear_num_key_heads or 0))
        sizes.append(("linear_num_value_heads", spec.linear_num_value_heads or 0))
    if spec.mtp_layers:
        # Megatron MTP eh_proj is a ColumnParallelLinear(2h -> h): its output h is split.
        sizes.append(("hidden_size (MTP eh_proj)", spec.hidden_size))
    return tuple(sizes)


def uses_kv_heads(spec: ModelSpec) -> bool:
    """GQA/MHA attention has KV heads to split; MLA has a shared latent instead (no KV heads)."""
    return spec.full_attention_layers > 0 and not spec.is_mla


def kv_problem(spec: ModelSpec, t: int) -> str | None:
    """Why KV heads cannot be laid out over t ranks, or None (vLLM QKVParallelLinear rule)."""
    n_kv = spec.kv_heads
    if not uses_kv_heads(spec) or n_kv % t == 0 or t % n_kv == 0:
        return None
    return (
        f"num_key_value_heads={n_kv} and t={t} do not divide one another, so KV heads can be "
        "neither split nor replicated evenly"
    )


def tp_problem(spec: ModelSpec, t: int) -> str | None:
    """The first reason t does not split ``spec``, or None when it does."""
    for what, n in split_sizes(spec):
        if n % t:
            return f"{what}={n} is not divisible by t={t}"
    return kv_problem(spec, t)


def valid_tp_sizes(spec: ModelSpec, max_t: int) -> list[int]:
    """Every t <= max_t that divides the query heads, FFN widths and linear-attention heads and
    lays KV heads out evenly (the vocabulary is padded, so it never blocks). Like calculon's
    ``Llm.get_all_tensor_parallelisms``, as a plain function."""
    require_t(max_t, "max_t")
    # Every valid t divides num_attention_heads (the first split size), so only its divisors,
    # found in O(sqrt n), are tried: 10^9 heads take milliseconds, not minutes.
    candidates = (t for t in divisors(spec.num_attention_heads) if t <= max_t)
    return [t for t in candidates if tp_problem(spec, t) is None]


def all_valid_tp_sizes(spec: ModelSpec) -> list[int]:
    """Every valid t: t must divide num_attention_heads, so none exceeds it."""
    return valid_tp_sizes(spec, spec.num_attention_heads)


def require_tp(spec: ModelSpec, t: int) -> None:
    """InputError for a non-positive t; DivisibilityError (listing valid t) for a bad split."""
    require_t(t)
    problem = tp_problem(spec, t)
    if problem is not None:
        valid = ", ".join(str(v) for v in all_valid_tp_sizes(spec))
        raise DivisibilityError(f"{problem}; use t in {valid} for {spec.name}")


def kv_split(spec: ModelSpec, t: int) -> tuple[int, int]:
    """(KV heads per rank, ranks holding each KV head) for a valid t (vLLM QKVParallelLinear).

    Seed 000: 4 KV heads, t=8 -> (1, 2); t=4 -> (1, 1). Seed 003: 8 KV heads, t=8 -> (1, 1).
    """
    n_kv = spec.kv_heads
    if t >= n_kv:
        return 1, t // n_kv
    return n_kv // t, 1


def max_t_without_replication(spec: ModelSpec) -> int:
    """Largest valid t that needs no KV replication: it divides num_key_value_heads (and the
    query heads). Seed 003 §7.3.4: Llama 3, n_kv = 8 -> 8. MLA has no KV heads to replicate,
    so there it is the largest valid t."""
    if not uses_kv_heads(spec):
        return max(all_valid_tp_sizes(spec))
    return max(t for t in valid_tp_sizes(spec, spec.kv_heads) if spec.kv_heads % t == 0)


def padded_vocab(vocab_size: int, t: int, pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE) -> int:
    """Vocabulary rounded up to a multiple of pad_multiple·t (Megatron-LM
    ``_vocab_size_with_padding``). pad_multiple 1 leaves a vocab that t divides unchanged
    (seed 003 §7.3.4: 128256 / 8 = 16032 rows per card)."""
    require_t(t)
    if isinstance(pad_multiple, bool) or not isinstance(pad_multiple, int) or pad_multiple < 1:
        raise InputError(
            f"vocab pad multiple={pad_multiple} must be a positive integer (1 = no padding)"
        )
    multiple = pad_multiple * t
    return -(-vocab_size // multiple) * multiple


def kv_warning(spec: ModelSpec, t: int) -> str | None:
    """One line when t > num_key_value_heads forces KV replication (seed 000), else None."""
    if not uses_kv_heads(spec):
        return None
    _, replicas = kv_split(spec, t)
    if replicas == 1:
        return None
    return (
        f"t={t}: {spec.name} has num_key_value_heads={spec.kv_heads} < t, so each KV head is "
        f"replicated on {replicas} ranks (K/V weights per rank are {replicas}x an even split); "
        f"the largest t without replication is {max_t_without_replication(spec)}"
    )
