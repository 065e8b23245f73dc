"""Inverse questions (issue 11 §4): longest sequence and largest micro-batch that fit a layout,
fewest GPUs that reach a step time. Each answer is checked against the memory model it searches
(``tpcalc layout``'s memory_bytes_per_rank at the answer and at the next legal value), never
against a number copied from the search itself."""

from __future__ import annotations

import json

import pytest
from msgspec.structs import replace

from tests.conftest import run_cli
from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.calc.plan.inverse import (
    divisors,
    gpu_count_grid,
    max_micro_batch,
    max_seq,
    memory_budget_bytes,
    min_gpus,
    seq_step,
    worst_rank_bytes,
)
from tpcalc.catalog import load_model
from tpcalc.errors import InputError


@pytest.fixture(scope="module")
def l405():
    return load_model("llama3-405b")


# Llama 3 405B as the Llama 3 paper Table 4 runs it at 8K: [TP, CP, PP, DP] = 8 x 1 x 16 x 128
# (seed 000), ZeRO-1, 16 micro-batches.
LAYOUT_405 = ParallelLayout(gpus_per_node=8, tp=8, pp=16, dp=128, zero=ZeroStage.optimizer)
RUN_405 = LayoutRun(seq=8192, microbatches=16)


def layout_memory(*args: str) -> float:
    """memory_bytes_per_rank as `tpcalc layout --format json` prints it (the independent path)."""
    r = run_cli("layout", *args, "-f", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)[-1]["memory_bytes_per_rank"]


def test_seq_step_follows_cp_zigzag_and_sp():
    lay = ParallelLayout(gpus_per_node=8, tp=8, cp=2)
    # cp=2: zig-zag needs 2·cp = 4 | s; SP: t·cp = 16 | s  ->  lcm = 16
    assert seq_step(lay, sp=True) == 16
    assert seq_step(lay, sp=False) == 4
    assert seq_step(ParallelLayout(gpus_per_node=8, tp=3), sp=True) == 3
    assert seq_step(ParallelLayout(gpus_per_node=8), sp=True) == 1


def test_max_seq_of_llama3_405b_on_its_published_layout(l405, h100):
    card = h100.memory_bytes.value
    fit = max_seq(l405, LAYOUT_405, RUN_405, memory_budget_bytes(card))
    # The answer fits and the next legal length (s + 8, SP over t = 8) does not, as
    # `tpcalc layout` prices them (README: 77.0 GB at 8,192, so the answer is above 8,192).
    assert fit.step == 8 and fit.value is not None and fit.value > 8192
    assert fit.next_value == fit.value + 8
    common = ("-m", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--zero", "1",
              "--microbatches", "16")  # fmt: skip
    at = layout_memory(*common, "--seq", str(fit.value))
    above = layout_memory(*common, "--seq", str(fit.next_value))
    assert at == pytest.approx(fit.memory_bytes, rel=1e-12) and at <= card
    assert above == pytest.approx(fit.next_memory_bytes, rel=1e-12) and above > card


def test_max_seq_lands_exactly_on_a_budget_set_at_a_known_length(l405):
    # Budget = memory at s = 4096 exactly: the search must return 4096 (memory strictly grows).
    budget = worst_rank_bytes(l405, LAYOUT_405, replace(RUN_405, seq=4096))
    assert max_seq(l405, LAYOUT_405, RUN_405, budget).value == 4096
    assert max_seq(l405, LAYOUT_405, RUN_405, budget - 1).value == 4088


def test_max_seq_none_when_the_states_alone_do_not_fit(l405, h100):
    lay = ParallelLayout(gpus_per_node=8, tp=8, pp=1, dp=1)  # 405B x 16 B / 8 = 811 GB of states
    fit = max_seq(l405, lay, RUN_405, h100.memory_bytes.value)
    assert fit.value is None and fit.next_value == 8 and fit.next_memory_bytes > 80e9


def test_max_seq_rejects_an_impossible_layout(l405):
    with pytest.raises(InputError, match="num_attention_heads|tp"):
        max_seq(l405, ParallelLayout(gpus_per_node=8, tp=3), RUN_405, 80e9)


def test_headroom_never_lengthens_the_sequence(l405, h100):
    card = h100.memory_bytes.value
    full = max_seq(l405, LAYOUT_405, RUN_405, memory_budget_bytes(card)).value
    kept = max_seq(l405, LAYOUT_405, RUN_405, memory_budget_bytes(card, 0.1)).value
    reserved = max_seq(l405, LAYOUT_405, RUN_405, memory_budget_bytes(card, 0.0, 4e9)).value
    assert kept < full and reserved < full


def test_max_micro_batch_with_a_global_batch_tries_every_divisor(l405, h100):
    # 2048 sequences over dp = 128: 16 per rank, so b in {1, 2, 4, 8, 16} with m = 16 / b; the
    # search stops at the first that does not fit (memory never falls as b grows).
    fit = max_micro_batch(l405, LAYOUT_405, RUN_405, h100.memory_bytes.value, global_batch=2048)
    assert [p.value for p in fit.probes] == [1, 2]
    common = ("-m", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--zero", "1",
              "--seq", "8192")  # fmt: skip
    # README: b = 1 needs 77.0 GB; b = 2 (m = 8, 8 in flight on the first stage) does not fit.
    assert fit.value == 1 and fit.next_value == 2
    at2 = layout_memory(*common, "--micro-batch", "2", "--microbatches", "8")
    assert at2 == pytest.approx(fit.next_memory_bytes, rel=1e-12) and at2 > 80e9


def test_max_micro_batch_without_a_global_batch_bisects(qwen38, h100):
    lay = ParallelLayout(gpus_per_node=8, tp=8, dp=1, zero=ZeroStage.optimizer)
    run = LayoutRun(seq=4096, microbatches=1)
    fit = max_micro_batch(qwen38, lay, run, h100.memory_bytes.value)
    assert fit.value is not None and fit.next_value == fit.value + 1
    assert fit.memory_bytes <= 80e9 < fit.next_memory_bytes
    again = worst_rank_bytes(qwen38, lay, replace(run, micro_batch=fit.value))
    assert again == fit.memory_bytes


def test_global_batch_must_divide_over_dp(l405):
    with pytest.raises(InputError, match="not divisible by dp=128"):
        max_micro_batch(l405, LAYOUT_405, RUN_405, 80e9, global_batch=1000)


def test_min_gpus_bisects_between_powers_of_two():
    # A made-up best-step curve, 1000 s · GPU: the target 10 s is met from 100 GPUs on.
    def best(g: int) -> float:
        return 1000.0 / g

    coarse, fine = gpu_count_grid(8, 1024)
    found = min_gpus(10.0, coarse, fine, best)
    assert found.gpus == 104  # the first node multiple >= 100
    assert {p.gpus for p in found.probes} >= {64, 128}
    assert min_gpus(0.5, coarse, fine, best).gpus is None


def test_min_gpus_skips_counts_with_no_feasible_layout():
    def best(g: int) -> float | None:
        return None if g < 32 else 60.0 / g

    found = min_gpus(1.0, [1, 2, 4, 8, 16, 32, 64], [8, 16, 24, 32, 40, 48, 56, 64], best)
    assert found.gpus == 64 and found.step_time_s == pytest.approx(60 / 64)


def test_divisors():
    assert divisors(16) == [1, 2, 4, 8, 16]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(10**12)[-1] == 10**12 and len(divisors(10**12)) == 169  # (12+1)²


def test_gpu_count_grid():
    assert gpu_count_grid(8, 64) == (
        [1, 2, 4, 8, 16, 32, 64],
        [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64],
    )
    # a count that is not a power of two is tried itself, as the last coarse count
    assert gpu_count_grid(8, 48) == ([1, 2, 4, 8, 16, 32, 48], [1, 2, 4, 8, 16, 24, 32, 40, 48])


# Megatron-Core's accounted split (embedding and loss counted as layers): 126 + 2 = 128 slots over
# PP16 x VP8 gives one slot per virtual stage (Megatron-Bridge llama31_405b_pretrain_config sets
# both options); the even split refuses it (128 virtual stages for 126 layers).
ACCOUNTED = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")
PLAN_405 = ("plan", "-m", "llama3-405b", "--gpus", "16384", "--tp", "8", "--pp", "16",
            "--zero", "1", "--global-batch", "2048")  # fmt: skip
LAYOUT_405_ARGS = ("-m", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--zero", "1",
                   "--microbatches", "16")  # fmt: skip


def test_max_seq_under_the_accounted_split_matches_layout():
    r = run_cli(*PLAN_405, "--vpp", "8", "--max-seq", *ACCOUNTED, "-f", "json")
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    assert row["embedding_in_split"] is True and row["loss_in_split"] is True
    assert row["stage_layers"] == "0+1×126+0"
    vp8 = (*LAYOUT_405_ARGS, "--vpp", "8", "--schedule", "interleaved", *ACCOUNTED)
    at = layout_memory(*vp8, "--seq", str(row["max_seq_tokens"]))
    above = layout_memory(*vp8, "--seq", str(row["next_seq_tokens"]))
    assert at == pytest.approx(row["memory_bytes_per_rank"], rel=1e-12) and at <= 80e9
    assert above == pytest.approx(row["next_memory_bytes_per_rank"], rel=1e-12) and above > 80e9
    # the margins on each side, from what tpcalc layout prints at both lengths
    assert row["memory_left_bytes"] == pytest.approx(80e9 - at, rel=1e-9, abs=1)
    assert row["next_over_budget_bytes"] == pytest.approx(above - 80e9, rel=1e-9, abs=1)
    # the even split cannot place this layout at all
    even = run_cli(*PLAN_405, "--vpp", "8", "--max-seq")
    assert even.code != 0 and even.err.count("\n") == 1 and "126" in even.err


def test_the_accounted_split_moves_the_answer_as_its_stages_do(l405):
    # PP16 VP1: the loss and embedding slots take one layer from the first and the last stage
    # (7+8x14+7, the Llama 3 paper's own split, §3.3.2), so the first rank holds one layer
    # fewer than the even split's 8+8x14+... and the longest sequence can only grow.
    from tpcalc.calc.pipeline.schedule import accounted_split

    counts = accounted_split(126, 16, 1, embedding=True, loss=True)
    assert counts == (7, *[8] * 14, 7)
    budget = 80e9
    even = max_seq(l405, LAYOUT_405, RUN_405, budget)
    accounted = max_seq(l405, LAYOUT_405, RUN_405, budget, counts=counts)
    assert accounted.value is not None and even.value is not None
    assert accounted.value >= even.value
    at = worst_rank_bytes(l405, LAYOUT_405, replace(RUN_405, seq=accounted.value), counts)
    assert at == accounted.memory_bytes and at <= budget


def test_largest_micro_batch_under_the_accounted_split_matches_layout():
    r = run_cli(*PLAN_405, "--vpp", "4", "--largest-micro-batch", "--seq", "4096", *ACCOUNTED,
                "--memory-headroom", "0.2", "-f", "json")  # fmt: skip
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    assert row["loss_in_split"] is True and row["stage_layers"] == "1+2×62+1"
    b = row["max_micro_batch"]
    assert b is not None
    mem = layout_memory(
        *LAYOUT_405_ARGS[:-2], "--microbatches", str(16 // b), "--micro-batch", str(b),
        "--seq", "4096", "--vpp", "4", "--schedule", "interleaved", *ACCOUNTED,
    )  # fmt: skip
    assert mem == pytest.approx(row["memory_bytes_per_rank"], rel=1e-12) and mem <= 0.8 * 80e9
    if row["next_micro_batch"] is not None:
        b2 = row["next_micro_batch"]
        above = layout_memory(
            *LAYOUT_405_ARGS[:-2], "--microbatches", str(16 // b2), "--micro-batch", str(b2),
            "--seq", "4096", "--vpp", "4", "--schedule", "interleaved", *ACCOUNTED,
        )  # fmt: skip
        assert above == pytest.approx(row["next_memory_bytes_per_rank"], rel=1e-12)
        assert above > 0.8 * 80e9


def test_an_accounted_split_that_does_not_divide_is_one_line():
    # 126 + 1 = 127 slots (loss only) do not divide by pp = 16
    r = run_cli(*PLAN_405, "--max-seq", "--account-for-loss-in-pipeline-split")
    assert r.code != 0 and r.out == "" and r.err.count("\n") == 1
    assert "valid pp: 1, 127" in r.err
