"""Megatron-Bridge performance presets as the validation tests read them: which
WorkloadBaseConfig field holds each printed layout column, and the defaults a preset leaves
unset (scripts/performance/utils/utils.py; the same at 25.11 @ 5776a6d, 26.02.01 @ cfeddcd,
26.04.01 @ 21d102f and 26.06 @ 8f341b0)."""

from __future__ import annotations

# Row field -> WorkloadBaseConfig field.
PRESET_LAYOUT = {
    "gpus": "num_gpus",
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "vp": "virtual_pipeline_model_parallel_size",
    "ep": "expert_model_parallel_size",
    "global_batch": "global_batch_size",
    "micro_batch": "micro_batch_size",
}
# WorkloadBaseConfig defaults: tp = pp = cp = ep = 1, num_gpus = global_batch_size = 1,
# micro_batch_size = 1, virtual_pipeline_model_parallel_size = None.
PRESET_DEFAULTS = {
    "num_gpus": 1,
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "context_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,
    "expert_model_parallel_size": 1,
    "global_batch_size": 1,
    "micro_batch_size": 1,
}
