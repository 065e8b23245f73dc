"""Pipeline parallelism: seed 000's stage, p2p and bubble figures; schedules; bad splits."""

from __future__ import annotations

import itertools
import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpcalc.calc.links.link import Link
from tpcalc.calc.params.counts import (
    active_layer_params,
    active_params,
    embedding_params,
    final_norm_params,
    lm_head_params,
    matmul_params,
    total_params,
)
from tpcalc.calc.pipeline import schedule as pp
from tpcalc.calc.pipeline.breakdown import pipeline_breakdown, stage_matmul_params, stage_params
from tpcalc.calc.pipeline.breakdown_explain import breakdown_terms
from tpcalc.calc.pipeline.schedule import EQUAL_TIMES, StageTimes
from tpcalc.choices import Schedule
from tpcalc.errors import DivisibilityError, InputError
from tpcalc.terms import Row
from tpcalc.units import GB, MB, Dtype

SEED_P, SEED_M, SEED_V = 8, 32, 4  # seed 000 §流水线并行: p = 8, m = 32, interleaved v = 4


def test_layers_per_stage(qwen38):
    # seed 000 summary: 64 layers, p = 8 -> 8 layers per stage
    assert pp.rank_layer_counts(qwen38.num_hidden_layers, SEED_P) == (8,) * 8


def test_p2p_per_microbatch(qwen38):
    v = pp.p2p_bytes(4096, 1, qwen38.hidden_size, Dtype.bf16, scatter_gather=False)
    # seed 000 summary: 0.0 GB between stages per micro-batch of 4,096 tokens (41.9 MB)
    assert f"{v / GB:.1f}" == "0.0"
    assert abs(v / MB - 41.9) <= 0.05


def test_p2p_scatter_gather_divides_by_t(qwen38):
    # Narayanan et al. 2021 §4.1: each of the t ranks sends 1/t, the next stage all-gathers
    full = pp.p2p_bytes(4096, 1, qwen38.hidden_size, Dtype.bf16, tp=8, scatter_gather=False)
    split = pp.p2p_bytes(4096, 1, qwen38.hidden_size, Dtype.bf16, tp=8, scatter_gather=True)
    assert split * 8 == full


def test_1f1b_bubble_and_share():
    r = pp.bubble_ratio(Schedule.one_f_one_b, SEED_P, SEED_M, EQUAL_TIMES)
    s = pp.bubble_share(Schedule.one_f_one_b, SEED_P, SEED_M, EQUAL_TIMES)
    # seed 000 §流水线并行: bubble (p-1)/m = 21.9%, 17.9% of the total time
    assert abs(r * 100 - 21.9) <= 0.05
    assert abs(s * 100 - 17.9) <= 0.05


def test_interleaved_bubble():
    r = pp.bubble_ratio(Schedule.interleaved, SEED_P, SEED_M, EQUAL_TIMES, SEED_V)
    # seed 000 §流水线并行: interleaved v = 4 still leaves 5.5%
    assert abs(r * 100 - 5.5) <= 0.05


def test_zb_h1_is_a_third_of_1f1b_when_f_b_w_are_equal():
    zb = pp.bubble_time_s(Schedule.zb_h1, SEED_P, SEED_M, EQUAL_TIMES)
    ref = pp.bubble_time_s(Schedule.one_f_one_b, SEED_P, SEED_M, EQUAL_TIMES)
    # seed 000; Qi et al. 2023 §3.1: with F = B = W, ZB-H1's bubble is 1/3 of 1F1B's
    assert Fraction(zb / ref).limit_denominator(10) == Fraction(1, 3)


def test_dualpipe_table2():
    # DeepSeek-V3 Table 2 with F = B_in = W = 1, B_full = 2, F&B = F + B_full = 3 (no overlap):
    # DualPipe (8/2-1)(3 + 2 - 3) = 6; 1F1B (8-1)(F + B_full) = 21
    assert pp.bubble_time_s(Schedule.dualpipe, 8, 32, EQUAL_TIMES) == 6
    assert pp.bubble_time_s(Schedule.one_f_one_b, 8, 32, EQUAL_TIMES) == 21
    overlapped = StageTimes(1, 1, 1, fb_overlap_s=2)  # F&B = max(F, B_full)
    assert pp.bubble_time_s(Schedule.dualpipe, 8, 32, overlapped) == 3
    assert pp.in_flight_chunks(Schedule.dualpipe, 8, 32, 1, 0) == 9  # Table 2: PP + 1


def test_dualpipe_holds_two_parameter_copies(qwen38):
    # DeepSeek-V3 Table 2: "Parameter 2x"; every parameter sits on two ranks
    assert sum(stage_params(qwen38, 8, 1, Schedule.dualpipe)) == 2 * total_params(qwen38)


@pytest.mark.parametrize(("p", "v"), [(1, 1), (8, 1), (4, 4), (16, 2), (5, 3)])
def test_stage_params_add_up_to_the_model(qwen38, p, v):
    # With p > 1 the last stage builds its own copy of the embedding for the MTP module
    # (Megatron-Core GPTModel: LanguageModelEmbedding where pre_process or mtp_process): Qwen3.8
    # has one MTP module, V·h = 248,320 x 5,120 parameters
    schedule = Schedule.interleaved if v > 1 else Schedule.one_f_one_b
    copy = qwen38.vocab_size * qwen38.hidden_size if p > 1 else 0
    assert sum(stage_params(qwen38, p, v, schedule)) == total_params(qwen38) + copy


def test_a_tied_output_layer_is_a_copy_on_the_last_stage():
    # Megatron-Core LanguageModule.setup_embeddings_and_output_layer: with pp > 1 the last
    # stage allocates the tied output weight, zeroed, and all-reduces its gradient with the
    # first stage's embedding; on one rank (pp = 1, DualPipe's ends) the two share one weight.
    # GPT-3 175B ties them: V·h = 50,257 x 12,288 (config.json).
    from tpcalc.catalog import load_model

    gpt = load_model("gpt3-175b")
    assert gpt.tie_word_embeddings
    one = sum(stage_params(gpt, 1, 1, Schedule.one_f_one_b))
    assert one == total_params(gpt)
    for p in (2, 8):
        split = stage_params(gpt, p, 1, Schedule.one_f_one_b)
        assert sum(split) == total_params(gpt) + gpt.vocab_size * gpt.hidden_size
    assert sum(stage_params(gpt, 8, 1, Schedule.dualpipe)) == 2 * total_params(gpt)


def test_stage_compute_params_add_up_to_seed_000_matmul_params(qwen38):
    # seed 000: matmul parameters 25,624,600,064 = layers + final norm + LM head, split by stage
    assert sum(stage_matmul_params(qwen38, 8, 1)) == matmul_params(qwen38)


def test_moe_stages_compute_with_active_experts_only():
    from tpcalc.catalog import load_model

    ds = load_model("deepseek-v3")
    layers = sum(active_layer_params(ds, i) for i in range(ds.num_hidden_layers))
    # DeepSeek-V3 report §1: 37B activated per token (params.active_params, embedding included)
    rest = embedding_params(ds) + final_norm_params(ds) + lm_head_params(ds)
    assert layers + rest == active_params(ds)


def test_in_flight_per_schedule():
    p, m = 8, 32
    assert pp.in_flight_chunks(Schedule.gpipe, p, m, 1, 0) == m  # GPipe keeps all m
    assert pp.in_flight_chunks(Schedule.one_f_one_b, p, m, 1, 0) == p  # 1F1B: p on stage 0
    assert pp.in_flight_chunks(Schedule.one_f_one_b, p, m, 1, p - 1) == 1  # and 1 on the last
    assert pp.in_flight_chunks(Schedule.one_f_one_b, p, 3, 1, 0) == 3  # never more than m
    assert pp.in_flight_chunks(Schedule.zb_h1, p, m, 1, 0) == p  # ZB-H1 keeps 1F1B's peak


@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (8, 4), (16, 3)])
def test_interleaved_in_flight_matches_korthikanti(p, v):
    # Korthikanti et al. 2022 §4.2.3: interleaving multiplies the first stage's p micro-batches
    # by 1 + (p-1)/(p·v)
    chunks = pp.in_flight_chunks(Schedule.interleaved, p, 64, v, 0)
    assert chunks / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_uneven_split_puts_extra_layers_in_the_middle():
    counts = pp.rank_layer_counts(62, 8)
    assert sum(counts) == 62 and max(counts) - min(counts) == 1
    assert counts[0] == counts[-1] == 7  # the ends hold the embedding and the LM head


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((64, 6, 32, 1, Schedule.one_f_one_b), {"allow_uneven": False}, DivisibilityError,
         "num_hidden_layers=64 is not divisible by pp=6"),
        ((64, 128, 32, 1, Schedule.one_f_one_b), {}, InputError, "pp=128 exceeds"),
        ((64, 8, 0, 1, Schedule.one_f_one_b), {}, InputError, "microbatches=0"),
        ((64, 0, 4, 1, Schedule.one_f_one_b), {}, InputError, "pp=0"),
        ((64, 16, 32, 8, Schedule.interleaved), {}, InputError, "vpp=8 needs pp·vpp=128"),
        ((64, 8, 32, 4, Schedule.one_f_one_b), {}, InputError, "only to the interleaved"),
        ((64, 8, 32, 1, Schedule.interleaved), {}, InputError, "needs vpp >= 2"),
        ((64, 7, 32, 1, Schedule.dualpipe), {}, DivisibilityError, "even pp"),
        ((64, 8, 10, 1, Schedule.dualpipe), {}, InputError, ">= 2·pp=16"),
    ],
)  # fmt: skip
def test_impossible_pipelines_raise_one_line(args, kwargs, error, message):
    with pytest.raises(error, match=message) as exc:
        pp.check_pipeline(*args, **kwargs)
    assert "\n" not in str(exc.value)


def test_pipeline_row_on_the_seed(qwen38, h800):
    terms = breakdown_terms(pipeline_breakdown(
        qwen38, h800, p=8, m=32, seq=4096, micro_batch=1, link=Link.inter_node,
        layer_act_bytes=1e9,
    ), h800)  # fmt: skip
    row = Row(inputs={}, terms=terms)
    assert row.check_breakdowns() == []
    assert row.value("stage_layers") == "8,8,8,8,8,8,8,8"
    assert row.value("bubble_ratio") == pytest.approx(7 / 32)
    # 1F1B stage 0 keeps p = 8 micro-batches of its 8 layers
    assert row.value("stage_activation_bytes") == pytest.approx(8 * 8 * 1e9)
    assert row.value("p2p_send_bytes_per_rank") == pytest.approx(2 * 32 * 4096 * 5120 * 2)


times_st = st.builds(
    StageTimes,
    st.floats(min_value=0.01, max_value=10),
    st.floats(min_value=0.01, max_value=10),
    st.floats(min_value=0.01, max_value=10),
)
p_st = st.integers(min_value=2, max_value=64)
m_st = st.integers(min_value=1, max_value=512)


@given(p=p_st, m=m_st, times=times_st, schedule=st.sampled_from(list(Schedule)))
def test_bubble_never_grows_with_m(p, m, times, schedule):
    v = 2 if schedule is Schedule.interleaved else 1
    assert pp.bubble_ratio(schedule, p, m + 1, times, v) <= pp.bubble_ratio(
        schedule, p, m, times, v
    )
    assert pp.bubble_share(schedule, p, m + 1, times, v) <= pp.bubble_share(
        schedule, p, m, times, v
    )


@given(p=p_st, m=m_st, v=st.integers(min_value=2, max_value=16), times=times_st)
def test_interleaved_bubble_shrinks_with_v(p, m, v, times):
    s = Schedule.interleaved
    assert pp.bubble_ratio(s, p, m, times, v + 1) < pp.bubble_ratio(s, p, m, times, v)
    assert pp.bubble_ratio(s, p, m, times, v) < pp.bubble_ratio(Schedule.one_f_one_b, p, m, times)


@given(p=p_st, m=m_st, times=times_st)
def test_zero_bubble_never_worse_than_1f1b(p, m, times):
    zb = pp.bubble_time_s(Schedule.zb_h1, p, m, times)
    assert 0 <= zb <= pp.bubble_time_s(Schedule.one_f_one_b, p, m, times)


@given(L=st.integers(min_value=1, max_value=200), p=st.integers(min_value=1, max_value=64))
def test_split_covers_every_layer(L, p):
    if p > L:
        return
    counts = pp.rank_layer_counts(L, p)
    assert sum(counts) == L and min(counts) >= 1 and max(counts) - min(counts) <= 1


@given(
    p=st.sampled_from([2, 4, 8, 16]),
    mult=st.integers(min_value=1, max_value=8),
    schedule=st.sampled_from(list(Schedule)),
)
def test_pipeline_rows_add_up(qwen38, h800, p, mult, schedule):
    m = 2 * p * mult
    v = 2 if schedule is Schedule.interleaved else 1
    terms = breakdown_terms(pipeline_breakdown(
        qwen38, h800, p=p, m=m, v=v, schedule=schedule, seq=4096, micro_batch=1,
        link=Link.inter_node, layer_act_bytes=1e9,
    ), h800)  # fmt: skip
    row = Row(inputs={}, terms=terms)
    assert row.check_breakdowns() == []
    assert 0 <= row.value("bubble_share_ratio") < 1


def test_pipeline_activations_match_layout_and_name_their_model(cli):
    import json

    from tpcalc.calc.activations.paper import paper_layer as table2_layer
    from tpcalc.calc.activations.paper_explain import layer_terms
    from tpcalc.calc.layout.groups import ParallelLayout
    from tpcalc.calc.layout.memory import rank_memory
    from tpcalc.catalog import load_model
    from tpcalc.choices import ActivationModel, Recompute, StateRecipe

    qwen = load_model("qwen3.8")
    args = ("pipeline", "-m", "qwen3.8", "--pp", "8", "-s", "4096", "-f", "json")
    rows = {a: json.loads(cli(*args, "--activations", a).out)[0] for a in ("exact", "paper")}
    assert json.loads(cli(*args).out)[0]["activations"] == "exact"  # the default, as layout's
    # paper: 1F1B rank 0 keeps 8 micro-batches × 8 layers × Table 2's selective-recompute layer
    paper_layer = layer_terms(table2_layer(qwen, seq=4096, micro_batch=1, t=1, sp=False,
                                    recompute=Recompute.selective))[-1].value  # fmt: skip
    assert rows["paper"]["stage_activation_bytes"] == pytest.approx(8 * 8 * paper_layer)
    assert abs(rows["paper"]["stage_activation_bytes"] / 1e9 - 45.6) <= 0.05  # seed 000: 45.6 GB
    # exact: the same per-layer model and in-flight count as `tpcalc layout` (rank 0)
    ranks = rank_memory(
        qwen, ParallelLayout(pp=8, gpus_per_node=8), seq=4096, micro_batch=1, microbatches=32,
        vpp=1, schedule=Schedule.one_f_one_b, recipe=StateRecipe.zero16, sp=False,
        recompute=Recompute.selective, activations=ActivationModel.exact,
    )  # fmt: skip
    assert rows["exact"]["stage_activation_bytes"] == pytest.approx(ranks[0].activation_bytes)
    assert rows["exact"]["stage_activation_bytes"] != rows["paper"]["stage_activation_bytes"]


# --- Megatron-Core's accounted split (account_for_embedding/loss_in_pipeline_split) ----------
# megatron/core/transformer/transformer_block.py get_num_layers_to_build: layers + 1 per counted
# end, split evenly over pp and then vpp; the first virtual stage builds one decoder layer fewer
# for the embedding, the last one fewer for the loss.


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "embedding", "loss", "expected"),
    [
        # Llama 3.1 405B (126 layers), Megatron-Bridge's PP16 x VP8: 128 slots, one each
        (126, 16, 8, True, True, (0,) + (1,) * 126 + (0,)),
        # the same on PP16 x VP4: two slots per virtual stage
        (126, 16, 4, True, True, (1,) + (2,) * 62 + (1,)),
        # one end counted: 31 + 1 = 32 slots over 4 stages of 8
        (31, 4, 1, True, False, (7, 8, 8, 8)),
        (31, 4, 1, False, True, (8, 8, 8, 7)),
        # a single stage holds both ends and every layer
        (3, 1, 1, True, True, (3,)),
    ],
)
def test_accounted_split_counts_the_ends_as_layers(layers, pp, vpp, embedding, loss, expected):
    from tpcalc.calc.pipeline.schedule import accounted_split, stage_split

    got = accounted_split(layers, pp, vpp, embedding=embedding, loss=loss)
    assert got == expected and sum(got) == layers
    assert stage_split(layers, pp, vpp, embedding=embedding, loss=loss) == expected


def test_accounted_split_on_qwen3_235b_equals_the_even_split_with_heavier_middles():
    # Qwen3-235B-A22B (94 layers) on PP8 with VP 1-4, as Megatron-Bridge runs it: 96 slots; the
    # even split gives its extra layers to the middle stages first, which is the same split
    from tpcalc.calc.pipeline.schedule import accounted_split, chunk_layer_counts

    for vpp in (1, 2, 3, 4):
        assert accounted_split(94, 8, vpp, embedding=True, loss=True) == chunk_layer_counts(
            94, 8 * vpp
        )


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "embedding", "loss", "message"),
    [
        (126, 16, 1, True, False, "126 + 1 = 127 slots do not divide by pp=16; valid pp: 1, 127"),
        (126, 16, 3, True, True, "8 per pipeline rank, which does not divide by vpp=3; "
         "valid vpp: 1, 2, 4, 8"),
    ],
)  # fmt: skip
def test_accounted_split_names_the_valid_sizes(layers, pp, vpp, embedding, loss, message):
    from tpcalc.calc.pipeline.schedule import accounted_split

    with pytest.raises(DivisibilityError, match=re.escape(message)):
        accounted_split(layers, pp, vpp, embedding=embedding, loss=loss)


def test_accounted_split_excludes_the_other_ways_to_set_the_split():
    from tpcalc.calc.pipeline.schedule import stage_split

    for other in ({"first": 2}, {"last": 2}, {"chunks": (8, 8, 8, 7)}):
        with pytest.raises(InputError, match="cannot be combined"):
            stage_split(31, 4, 1, embedding=True, **other)


def test_the_even_split_is_the_accounted_split_with_the_loss_counted():
    # the planner relies on it (calc/plan/space.split_ends): with the loss (and the embedding)
    # counted, wherever Megatron-Core's rules admit pp and vpp (slots = pp·vpp·per_chunk),
    # chunk_layer_counts' even split gives each virtual stage the layers accounted_split gives;
    # checked over every pp <= 64, vpp <= 16 and 1-8 slots per virtual stage
    from tpcalc.calc.pipeline.schedule import accounted_split, chunk_layer_counts

    checked = 0
    for p, v, per_chunk, embedding in itertools.product(
        range(1, 65), range(1, 17), range(1, 9), (False, True)
    ):
        layers = p * v * per_chunk - 1 - embedding
        if layers < 1:
            continue
        got = accounted_split(layers, p, v, embedding=embedding, loss=True)
        assert got == chunk_layer_counts(layers, p * v), (p, v, per_chunk, embedding)
        # the last virtual stage builds one layer fewer for the loss (and, when it is the only
        # stage, one more fewer for the embedding)
        alone = p * v == 1
        assert sum(got) == layers and got[-1] == per_chunk - 1 - (embedding and alone)
        checked += 1
    # 64·16·8·2 = 16,384 combinations; 5 leave no layer (p·v·per_chunk = 1, or 2 with both ends)
    assert checked == 16_379


# --- tpcalc pipeline with the stages set by hand (read against each pp of the sweep) ----------


def _pipeline_rows(cli, *args: str) -> list[dict]:
    import json

    r = cli("pipeline", *args, "-f", "json")
    return json.loads(r.out)


def test_pipeline_places_the_accounted_split_the_even_split_refuses(cli):
    from tests.conftest import run_cli

    # Llama 3.1 405B (126 layers) at PP16 x VP8 with both ends counted: 128 slots, one per
    # virtual stage (Megatron-Bridge's llama31_405b_pretrain_config); rank r holds virtual
    # stages r, r+16, ..., r+112, so ranks 0 and 15 hold 7 layers (an empty end slot) and the
    # others 8.
    common = ("-m", "llama3-405b", "-t", "8", "--pp", "16", "--vpp", "8", "--schedule",
              "interleaved", "--microbatches", "16")  # fmt: skip
    ends = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")
    row = _pipeline_rows(cli, *common, *ends)[0]
    assert row["stage_layers"] == ",".join(["7"] + ["8"] * 14 + ["7"])
    assert row["stage_split"] == "0+1×126+0" and row["loss_in_split"] is True
    refused = run_cli("pipeline", *common)
    assert refused.code != 0 and refused.err.count("\n") == 1 and "126" in refused.err


def test_pipeline_hand_split_matches_the_calculators(cli):
    # --first/--last-stage-layers on a pp sweep: each pp gets 8 layers on its ends and the rest
    # split evenly over the middle (Megatron-LM --decoder-first/last-pipeline-num-layers)
    from tpcalc.catalog import load_model

    l70 = load_model("llama3-70b")
    rows = _pipeline_rows(
        cli, "-m", "llama3-70b", "--pp", "4,8", "--first-stage-layers", "8",
        "--last-stage-layers", "8",
    )  # fmt: skip
    for row in rows:
        p = row["pp"]
        counts = pp.stage_split(80, p, 1, first=8, last=8)
        assert row["stage_layers"] == ",".join(map(str, counts))
        assert counts[0] == counts[-1] == 8 and sum(counts) == 80
        assert row["stage_params_max"] == max(stage_params(l70, p, 1, Schedule.one_f_one_b, counts))
    assert rows[0]["stage_layers"] == "8,32,32,8"
    even = _pipeline_rows(cli, "-m", "llama3-70b", "--pp", "4")[0]
    assert even["stage_layers"] == "20,20,20,20" and even["stage_split"] == "even"
    # the 32-layer middle stages carry more parameters than any stage of the even split
    assert rows[0]["stage_params_max"] > even["stage_params_max"]


def test_pipeline_layout_string_is_checked_against_each_pp():
    from tests.conftest import run_cli

    r = run_cli("pipeline", "-m", "llama3-70b", "--pp", "4,8", "--pipeline-layout",
                "Et*20|(t*20|)*2t*20L")  # fmt: skip
    assert r.code != 0 and r.out == "" and r.err.count("\n") == 1
    assert "pp · vpp = 8" in r.err
