"""The ten GPT models of Megatron-LM's April 2021 scaling table: each built-in config loads, its
shape is the table's and the launch script's, and its derived parameter count rounds to the
printed count.

Sources (the numbers below are copied from them; none is read from the config files or computed):
- NVIDIA/Megatron-LM images/cases_april2021.png @ 50a4b5fa0280a160cc1b03a1c15faddbc1b1da9a, the
  README's GPT scaling table (= Narayanan et al. 2021, arXiv 2104.04473, Table 1): "Hidden size",
  "Number of layers", "Number of parameters (billion)" (printed to 0.1). The README: "All models
  use a vocabulary size of 51,200 and a sequence length of 2048".
- NVIDIA/Megatron-LM examples/sc21/run_table_1.sh @ de7dc40f883ceed06344051c3c7ebd57da59cc53, the
  script that launches the table's runs: NLS (layers), HS (hidden), NAH (heads) per MODEL_SIZE.
The configs keep the GPT-2 tokenizer's 50,257 (Megatron pads it per TP); the printed counts use
the README's 51,200 (paper Eq. 2), so the count is compared with the vocabulary set to 51,200.
"""

from __future__ import annotations

import json

import pytest

from tpcalc.calc.params.counts import total_params
from tpcalc.catalog import load_model, model_names

README_VOCAB = 51200
BILLION = 1e9

# (config, printed params in billions, hidden, layers, heads):
# params/hidden/layers from cases_april2021.png; hidden/layers/heads from run_table_1.sh (HS, NLS,
# NAH); the table and the script agree on hidden and layers for every size.
TABLE = [
    ("megatron-gpt-1.7b", 1.7, 2304, 24, 24),
    ("megatron-gpt-3.6b", 3.6, 3072, 30, 32),
    ("megatron-gpt-7.5b", 7.5, 4096, 36, 32),
    ("megatron-gpt-18b", 18.4, 6144, 40, 48),
    ("megatron-gpt-39b", 39.1, 8192, 48, 64),
    ("megatron-gpt-76b", 76.1, 10240, 60, 80),
    ("megatron-gpt-145b", 145.6, 12288, 80, 96),
    ("megatron-gpt-310b", 310.1, 16384, 96, 128),
    ("megatron-gpt-530b", 529.6, 20480, 105, 128),
    ("megatron-gpt-1t", 1008.0, 25600, 128, 160),
]
NAMES = [row[0] for row in TABLE]


@pytest.mark.parametrize("name", NAMES)
def test_config_loads_and_is_listed(name):
    spec = load_model(name)
    assert spec.name == name
    assert name in model_names()


@pytest.mark.parametrize(("name", "printed_b", "hidden", "layers", "heads"), TABLE)
def test_shape_is_the_table_and_the_script(name, printed_b, hidden, layers, heads):
    spec = load_model(name)
    assert (spec.hidden_size, spec.num_hidden_layers) == (hidden, layers)
    assert spec.num_attention_heads == spec.num_key_value_heads == heads  # --num-attention-heads
    assert spec.intermediate_size == 4 * hidden  # ffn_hidden_size default, 4h
    assert spec.seq_length == spec.max_position_embeddings == 2048  # CONFIG.sh
    assert spec.tie_word_embeddings


@pytest.mark.parametrize(("name", "printed_b", "hidden", "layers", "heads"), TABLE)
def test_count_rounds_to_the_printed_count(name, printed_b, hidden, layers, heads):
    # "Number of parameters (billion)", printed to 0.1, at the README's vocabulary of 51,200
    spec = load_model(name).model_copy(update={"vocab_size": README_VOCAB})
    assert round(total_params(spec) / BILLION, 1) == printed_b


def test_show_prints_the_derived_total(cli):
    r = cli("show", "megatron-gpt-1t", "-f", "json")
    assert r.code == 0, r.err
    (row,) = json.loads(r.out)
    assert row["model"] == "megatron-gpt-1t"
    assert row["total_params"] == total_params(load_model("megatron-gpt-1t"))


def test_korthikanti_22b_is_a_22b_model():
    # Korthikanti et al. 2022 Table 3 names it by its size (22B): 64 heads, hidden 6144, 48
    # layers (as Calculon transcribed the table, examples/22B.json @ 3a082fe), at the paper's
    # 51,200-token vocabulary
    spec = load_model("megatron-gpt-22b")
    assert (spec.num_attention_heads, spec.hidden_size, spec.num_hidden_layers) == (64, 6144, 48)
    assert round(total_params(spec.model_copy(update={"vocab_size": 51200})) / 1e9) == 22
