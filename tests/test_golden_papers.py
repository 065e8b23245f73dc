"""Public papers tpcalc was never tuned to: parameter counts and the activation claim of the
Megatron papers, recomputed from architecture fields alone.

- Shoeybi et al. 2019 (Megatron-LM, arXiv 1909.08053) Table 2: 1.2B, 2.5B, 8.3B GPT-2 models
  (V = 51,200 after padding, s = 1,024).
- Narayanan et al. 2021 (arXiv 2104.04473) Table 1: GPT models from 1.7B to 1T parameters
  (V = 51,200, s = 2,048), whose counts come from their Eq. 2,
  P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)).
- Korthikanti et al. 2022 (arXiv 2205.05198) abstract: sequence parallelism + selective
  recomputation "reduce activation memory by 5x" against tensor parallelism alone (Table 3
  models, t = 8, s = 2,048).
These GPT models have learned absolute position embeddings (s·h), which tpcalc does not derive
(its GPT shape is GPT-NeoX's rotary one), so the table is declared as a part, with its source.
"""

from __future__ import annotations

import pytest

from tpcalc.calc.activations.paper import paper_layer
from tpcalc.calc.activations.paper_explain import layer_terms
from tpcalc.calc.params.counts import total_params
from tpcalc.choices import Recompute
from tpcalc.specs import ModelSpec


def gpt(h: int, a: int, layers: int, *, seq: int, vocab: int = 51200) -> ModelSpec:
    """A Megatron GPT: 4h GeLU MLP, LayerNorm, biases, tied embedding, learned positions."""
    return ModelSpec.model_validate({
        "model_type": "gpt_neox", "hidden_size": h, "intermediate_size": 4 * h,
        "num_hidden_layers": layers, "num_attention_heads": a, "vocab_size": vocab,
        "tie_word_embeddings": True, "hidden_act": "gelu", "attention_bias": True,
        "mlp_bias": True,
        "tpcalc": {"name": f"gpt-{h}x{layers}", "seq_length": seq, "declared_parts": [{
            "name": "position_embeddings", "params": seq * h,
            "source": "Megatron GPT learned absolute position embeddings [s, h]",
        }]},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("printed_b", "layers", "h", "a"),
    [(1.2, 40, 1536, 16), (2.5, 54, 1920, 20), (8.3, 72, 3072, 32)],
)
def test_shoeybi_2019_table2(printed_b, layers, h, a):
    # Shoeybi et al. 2019 Table 2: parameter count in billions, printed to 0.1
    assert round(total_params(gpt(h, a, layers, seq=1024)) / 1e9, 1) == printed_b


NARAYANAN_TABLE1 = [  # (printed params in billions, heads, hidden, layers)
    (1.7, 24, 2304, 24), (3.6, 32, 3072, 30), (7.5, 32, 4096, 36), (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48), (76.1, 80, 10240, 60), (145.6, 96, 12288, 80), (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105), (1008.0, 160, 25600, 128),
]  # fmt: skip


@pytest.mark.parametrize(("printed_b", "a", "h", "layers"), NARAYANAN_TABLE1)
def test_narayanan_2021_table1(printed_b, a, h, layers):
    # Narayanan et al. 2021 Table 1, "Number of parameters (billion)", printed to 0.1
    spec = gpt(h, a, layers, seq=2048)
    assert round(total_params(spec) / 1e9, 1) == printed_b


@pytest.mark.parametrize(("a", "h", "layers"), [row[1:] for row in NARAYANAN_TABLE1])
def test_counter_is_eq2_plus_the_final_layernorm(a, h, layers):
    # Narayanan et al. 2021 Eq. 2 leaves out the final LayerNorm (weight + bias, 2h)
    v, s = 51200, 2048
    eq2 = 12 * layers * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * layers * h))
    assert total_params(gpt(h, a, layers, seq=s)) == pytest.approx(eq2 + 2 * h, rel=1e-12)


@pytest.mark.parametrize(
    ("name", "a", "h", "layers"),
    [("175B", 96, 12288, 96), ("530B", 128, 20480, 105), ("1T", 160, 25600, 128)],
)
def test_korthikanti_2022_five_times_less_activation_memory(name, a, h, layers):
    # Korthikanti et al. 2022 abstract: SP + selective recompute "reduce activation memory by
    # 5x" vs TP alone; Table 3 models at t = 8, s = 2048
    spec = gpt(h, a, layers, seq=2048)
    tp_only = layer_terms(paper_layer(spec, seq=2048, micro_batch=1, t=8, sp=False,
                                recompute=Recompute.none))[-1].value  # fmt: skip
    sp_selective = layer_terms(paper_layer(spec, seq=2048, micro_batch=1, t=8, sp=True,
                                     recompute=Recompute.selective))[-1].value  # fmt: skip
    assert round(tp_only / sp_selective) == 5
