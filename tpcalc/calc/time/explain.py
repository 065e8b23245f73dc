"""Label, formula and source of every StepTime field (the explain layer beside ``step.py``)."""

from __future__ import annotations

from tpcalc.calc.params.counts import SRC_EMBEDDING_SYNC
from tpcalc.calc.pipeline.schedule import SRC_EXPOSED_SENDS
from tpcalc.explain import Explanation
from tpcalc.terms import Unit

SRC_ROOFLINE = (
    "Williams et al. 2009 (roofline); GEMM and attention efficiencies and HBM bandwidth from the "
    "card's performance block (docs/kernel-measurements.md)"
)
SRC_GEMM = "Narayanan et al. 2021 §5.1 (a GEMM's backward is two GEMMs of its FLOP)"
SRC_FA = "Dao 2023 (FlashAttention-2) §3.1: backward 2.5× forward; causal skips half the blocks"
SRC_CP_KERNELS = (
    "Transformer Engine context_parallel.py, AttnFuncWithCPAndKVP2P: diagonal, lower- and "
    "upper-triangle sections"
)
SRC_TP_OVERLAP = (
    "Shoeybi et al. 2019 §3 (f/g); Korthikanti et al. 2022 §4.2.2 (SP); overlapped only with "
    "--tp-comm-overlap (Wang et al. 2022, decomposed overlap; TE userbuffers)"
)
SRC_CP = "Liu et al. 2023 (Ring Attention) §3: K,V ring steps run under the attention blocks"
SRC_EP = (
    "Megatron-Core MoEAlltoAllTokenDispatcher: dispatch + combine per MoE layer and pass; a "
    "node-aware (flex: DeepEP / HybridEP) dispatcher crosses nodes once per remote node "
    "(DeepSeek-V3 report §3.2.1)"
)
SRC_BUBBLE = (
    "GPipe §2.3; Narayanan et al. 2021 §2.2 (1F1B, interleaved (p−1)/v); Qi et al. 2023 §3.1 "
    "(ZB-H1); DeepSeek-V3 report Table 2 (DualPipe); over the mean stage F, B, W"
)
SRC_DP = (
    "Megatron-Core DDP overlap_grad_reduce / overlap_param_gather, buckets of max(40M, 1M·dp) "
    "parameters; Li et al. 2020 (PyTorch DDP) §3.2.3"
)
SRC_LINK = (
    "roofline (Williams et al. 2009) applied per link: collectives sharing a GPU's NIC or "
    "NVLink add their transfer times whatever they overlap; DeepSeek-V3 report §3.2.1-3.2.2 "
    "(the all-to-all budgeted against the per-GPU IB bandwidth); tpcalc.calc.time.step"
)
SRC_SM = (
    "an overlapped collective's kernels hold s = comm_kernel_sms / sm_count of the SMs while it "
    "runs, so the compute beside it ends s·H later (DeepSeek-V3 report §3.2.1: 20 SMs for the "
    "communication); the card's performance block"
)
SRC_ADAM = "Kingma & Ba 2015 (Adam); Megatron distributed optimizer: fp32 main params, m, v"
SRC_MFU = "Chowdhery et al. 2022 (PaLM) App. B: MFU = model FLOP/s / peak FLOP/s"

STEP = "step_time_s"
STEP_EXPLANATIONS: dict[str, Explanation] = {
    "gemm_time_s": Explanation(
        "GEMMs", Unit.seconds,
        "m · Σ 2·M·N·K / (peak · eff_max · Π x/(x + x½) · scale), F + B + W, bottleneck stage",
        f"{SRC_GEMM}; {SRC_ROOFLINE}", STEP,
    ),
    "attention_time_s": Explanation(
        "attention core", Unit.seconds,
        "m · Σ attention FLOP / (peak · eff_attention · scale), forward and backward; eff by "
        "the query block S on the causal kernel's curve or the unmasked one's (CP: the diagonal "
        "step causal at s/cp, the cp − 1 others unmasked at s/(2·cp))",
        f"{SRC_FA}; {SRC_ROOFLINE}; {SRC_CP_KERNELS}", STEP,
    ),
    "memory_bound_time_s": Explanation(
        "memory-bound kernels", Unit.seconds,
        "m · Σ bytes read + written / (HBM bandwidth · efficiency): norms, activations, RoPE, "
        "residuals, permutes, loss",
        SRC_ROOFLINE, STEP,
    ),
    "moe_overhead_time_s": Explanation(
        "MoE layer overhead", Unit.seconds,
        "m · MoE layers · 2 passes · c · max(1, T / T_fit): c = moe_layer_overhead_s (fitted), "
        "T = s·b/cp tokens per rank, T_fit the most of the runs c was fitted on",
        "tools/fit_time.py (the rows it used are in the card's fitted source); beyond T_fit "
        "growing with the tokens (roofline.moe_layer_overhead, docs/kernel-measurements.md §6)",
        STEP,
    ),
    "recompute_time_s": Explanation(
        "recomputation", Unit.seconds,
        "m · the forward work recomputation re-runs (full: the layers; selective: core attention)",
        "Korthikanti et al. 2022 §5", STEP,
    ),
    "tp_exposed_time_s": Explanation(
        "TP comm, exposed", Unit.seconds,
        "m · Σ layers (collective bytes / busbw(M)), all of it, or with --tp-comm-overlap "
        "one chunk + max(rest − GEMMs, s·rest), rest = comm − one chunk",
        f"{SRC_TP_OVERLAP}; {SRC_SM}", STEP,
    ),
    "cp_exposed_time_s": Explanation(
        "CP comm, exposed", Unit.seconds,
        "m · Σ attention layers max(ring − attention time, s·ring), ring = (cp−1) · K,V chunk / "
        "busbw",
        f"{SRC_CP}; {SRC_SM}", STEP,
    ),
    "ep_exposed_time_s": Explanation(
        "EP all-to-all, exposed", Unit.seconds,
        "m · Σ MoE layers 2 all-to-all of T/t·k·h per pass (overlapped only with --ep-overlap: "
        "max(a2a − the other pass, s·a2a)); node-aware: T/t·h·(N−1)·(1 − C(E−E/N, k)/C(E, k)) "
        "over the network",
        f"{SRC_EP}; {SRC_SM}", STEP,
    ),
    "bubble_time_s": Explanation(
        "pipeline bubble", Unit.seconds,
        "schedule bubble over the mean stage F, B, W", SRC_BUBBLE, STEP,
    ),
    "pp_exposed_time_s": Explanation(
        "PP p2p, exposed", Unit.seconds,
        "sends of [s/t, b, h] the schedule's order waits for: 2(p−1) fill and drain "
        "(2(p·v−1) interleaved) + 2⌊(m−1)(p−1)/p⌋ in 1F1B's steady state (ZB-H1: at most "
        "2(p−1)); every send without overlap; + the embedding group's all-reduce of the "
        "V/t × h gradient where the last stage holds a copy of the embedding (tied head or MTP)",
        f"Narayanan et al. 2021 §2.2; Megatron overlap_p2p_comm; {SRC_EXPOSED_SENDS}; "
        f"{SRC_EMBEDDING_SYNC}",
        STEP,
    ),
    "dp_exposed_time_s": Explanation(
        "DP comm, exposed", Unit.seconds,
        "last bucket + max(rest − backward, s·rest) + first bucket + max(rest − forward, s·rest) "
        "(rest: the reduce-scatter, the all-gather, less that bucket), of the stage that ends "
        "the step",
        f"{SRC_DP}; {SRC_SM}", STEP,
    ),
    "optimizer_time_s": Explanation(
        "optimizer step", Unit.seconds,
        "params of the optimizer shard · 34 B / (HBM bandwidth · efficiency)", SRC_ADAM, STEP,
    ),
    "link_contention_time_s": Explanation(
        "link contention", Unit.seconds,
        "max(0, Σ collective times on the busiest link (NIC for groups across nodes, else "
        "NVLink) − the other parts)",
        SRC_LINK, STEP,
    ),
    "step_time_s": Explanation(
        "step time", Unit.seconds,
        "m · (F + B + W) of the bottleneck stage + bubble + exposed p2p + DP tail + optimizer "
        "+ link contention",
        "Narayanan et al. 2021 §2.2; Qi et al. 2023 §2; tpcalc.calc.time.step",
    ),
    "tokens_per_step": Explanation(
        "tokens per step", Unit.count, "s · b · m · dp",
        "Narayanan et al. 2021 §2: global batch = b · m · dp sequences",
    ),
    "tokens_per_s_per_gpu": Explanation(
        "tokens/s/GPU", Unit.count, "tokens per step / step time / GPUs",
        "the throughput NVIDIA's performance summaries publish",
    ),
    "model_flop_per_step": Explanation(
        "model FLOP per step", Unit.flop,
        "(6 · N_active + 3 · 2 · s · (d_qk + d_v) · heads · layers · mask) · tokens",
        "Kaplan et al. 2020 §2.1; Narayanan et al. 2021 Eq. 3; PaLM App. B",
    ),
    "model_flop_per_s_per_gpu": Explanation(
        "model FLOP/s/GPU", Unit.flop_per_s, "model FLOP per step / step time / GPUs", SRC_MFU,
    ),
    "mfu_ratio": Explanation(
        "MFU", Unit.ratio, "model FLOP/s/GPU / peak FLOP/s of the GEMM dtype", SRC_MFU,
    ),
    "hardware_flop_per_step": Explanation(
        "hardware FLOP per step", Unit.flop,
        "Σ every kernel's FLOP (attention backward 2.5×) · m · ranks", SRC_FA,
    ),
    "hfu_ratio": Explanation(
        "HFU", Unit.ratio, "hardware FLOP/s/GPU / peak FLOP/s", SRC_MFU,
    ),
    "tp_comm_time_s": Explanation(
        "TP comm, total", Unit.seconds, "m · Σ layers TP collectives, F and B, before overlap",
        SRC_TP_OVERLAP,
    ),
    "cp_comm_time_s": Explanation(
        "CP comm, total", Unit.seconds, "m · Σ attention layers (cp−1) ring steps, F and B",
        SRC_CP,
    ),
    "ep_comm_time_s": Explanation(
        "EP comm, total", Unit.seconds, "m · Σ MoE layers dispatch + combine, F and B", SRC_EP,
    ),
    "pp_comm_time_s": Explanation(
        "PP comm, total", Unit.seconds,
        "2 · (m · chunks + p − 1) sends of [s/t, b, h] + the embedding group's gradient "
        "all-reduce (tied head or MTP on a last stage of its own)",
        f"Narayanan et al. 2021 §2.2; {SRC_EMBEDDING_SYNC}",
    ),
    "dp_comm_time_s": Explanation(
        "DP comm, total", Unit.seconds,
        "buckets · bucket bytes · ring factor / busbw, before overlap", SRC_DP,
    ),
    "stage_forward_time_s": Explanation(
        "F, slowest stage", Unit.seconds,
        "Σ forward op times + exposed TP/CP/EP, one micro-batch", SRC_BUBBLE,
    ),
    "stage_backward_input_time_s": Explanation(
        "B, slowest stage", Unit.seconds,
        "Σ input-gradient op times + recompute + exposed TP/CP/EP, one micro-batch",
        SRC_BUBBLE,
    ),
    "stage_backward_weight_time_s": Explanation(
        "W, slowest stage", Unit.seconds, "Σ weight-gradient GEMM times, one micro-batch",
        "Qi et al. 2023 §2 (B and W apart)",
    ),
    "bottleneck_stage": Explanation(
        "bottleneck stage", Unit.count, "argmax over stages of F + B + W", SRC_BUBBLE,
    ),
}  # fmt: skip
