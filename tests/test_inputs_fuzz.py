"""Hostile field values in real configs: loading either succeeds with a spec every counter can
use, or raises a one-line TpcalcError; never another exception (issue 12 §1 and §3)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpcalc.calc.params.counts import total_params
from tpcalc.calc.tp.rules import all_valid_tp_sizes
from tpcalc.catalog import configs_root, load_hardware, load_model
from tpcalc.errors import TpcalcError

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
HF = {p.stem: json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))}
BUILTIN = {
    p.stem: yaml.safe_load(p.read_text())
    for p in sorted((configs_root() / "models").iterdir())
    if p.name.endswith(".yaml")
}
HARDWARE = yaml.safe_load((configs_root() / "hardware" / "h100-sxm.yaml").read_text())

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2**31, 2**64, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.lists(st.integers(min_value=-2, max_value=3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "value"]), st.integers(), max_size=2),
)
# keys the loaders do arithmetic on or that shape the model, plus a few that do not exist
EXTRA_KEYS = ["moe_layer_freq", "full_attention_interval", "decoder_sparse_step", "zzz"]


def _mutate(data: dict, picks: list[tuple[int, object]]) -> dict:
    data = json.loads(json.dumps(data))  # a deep copy
    keys = sorted(data) + EXTRA_KEYS
    for index, value in picks:
        data[keys[index % len(keys)]] = value
    return data


def _check(load, path: Path) -> None:
    load.cache_clear()  # the same path is rewritten for every example
    try:
        spec = load(str(path))
    except TpcalcError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    if hasattr(spec, "num_hidden_layers"):
        assert total_params(spec) > 0
        assert 1 in all_valid_tp_sizes(spec)


picks = st.lists(st.tuples(st.integers(min_value=0, max_value=200), values), min_size=1, max_size=3)
fuzz = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@fuzz
@given(name=st.sampled_from(sorted(HF)), changes=picks)
def test_hostile_hf_config_json(tmp_path, name, changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_mutate(HF[name], changes)))
    _check(load_model, path)


@fuzz
@given(name=st.sampled_from(sorted(BUILTIN)), changes=picks)
def test_hostile_model_yaml(tmp_path, name, changes):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_mutate(BUILTIN[name], changes)))
    _check(load_model, path)


@fuzz
@given(changes=picks)
def test_hostile_hardware_yaml(tmp_path, changes):
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(_mutate(HARDWARE, changes)))
    _check(load_hardware, path)
