"""layout: activations per layer kind from the exact model (default) or the paper formula."""

from __future__ import annotations

import json

from tpcalc.calc.activations.paper import paper_layer
from tpcalc.calc.activations.paper_explain import layer_terms
from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.layout.memory import layer_activation_bytes
from tpcalc.catalog import load_model
from tpcalc.choices import ActivationModel, Recompute


def test_paper_is_uniform_and_equals_table2_on_s_over_cp():
    spec = load_model("llama3-70b")
    layout = ParallelLayout(gpus_per_node=8, tp=8, cp=2, pp=1, dp=1)
    per_layer = layer_activation_bytes(spec, layout, seq=8192, micro_batch=1, sp=True,
                                       recompute=Recompute.selective,
                                       model=ActivationModel.paper)  # fmt: skip
    table2 = layer_terms(paper_layer(spec, seq=4096, micro_batch=1, t=8, sp=True,
                               recompute=Recompute.selective))[-1].value  # fmt: skip
    assert per_layer == [table2] * spec.num_hidden_layers


def test_exact_differs_by_layer_kind_for_a_hybrid_model():
    spec = load_model("qwen3.8")
    layout = ParallelLayout(gpus_per_node=8, tp=4, cp=1, pp=1, dp=1)
    per_layer = layer_activation_bytes(spec, layout, seq=4096, micro_batch=1, sp=True,
                                       recompute=Recompute.none)  # fmt: skip
    kinds = spec.resolved_layer_types
    full = {v for v, k in zip(per_layer, kinds, strict=True) if k == "full_attention"}
    linear = {v for v, k in zip(per_layer, kinds, strict=True) if k == "linear_attention"}
    assert len(full) == 1 and len(linear) == 1 and full != linear


def test_cli_echoes_the_activation_model(cli):
    args = ("layout", "-m", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "2", "-f", "json")
    exact = json.loads(cli(*args).out)[-1]
    paper = json.loads(cli(*args, "--activations", "paper").out)[-1]
    assert exact["activations"] == "exact" and paper["activations"] == "paper"
    assert exact["activation_bytes"] != paper["activation_bytes"]
