"""Model reports: the built-in models one row each (tpcalc models), and one model's architecture
with its parameter breakdown (tpcalc show)."""

from __future__ import annotations

from tpcalc.calc.params.breakdown_explain import param_terms
from tpcalc.calc.params.counts import total_params
from tpcalc.catalog import load_model, model_names
from tpcalc.specs import ModelSpec
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term

TOTAL_NOTE = (
    "total_params counts every parameter: MTP modules and declared parts (vision tower) "
    "included (DeepSeek-V3's published 671B leaves its MTP module out)."
)


def _config(key: str, label: str, value: Scalar, unit: Unit = Unit.count) -> Term:
    return term(key, label, value, unit, source="model config")


def _summary_terms(spec: ModelSpec) -> tuple[Term, ...]:
    return (
        term("total_params", "total params", total_params(spec), Unit.params,
             source="tpcalc.calc.params.counts.total_params"),
        _config("num_hidden_layers", "layers", spec.num_hidden_layers),
        _config("hidden_size", "hidden", spec.hidden_size),
        _config("num_attention_heads", "heads", spec.num_attention_heads),
        _config("num_key_value_heads", "KV heads", spec.kv_heads),
        _config("seq_length", "seq length", spec.seq_length),
    )  # fmt: skip


def models_report() -> Report:
    """One row per built-in model: name, display name, total parameters, shape, seq length."""
    rows = tuple(
        Row(
            inputs={"model": name, "name": spec.tpcalc.display_name or name},
            terms=_summary_terms(spec),
        )
        for name in model_names()
        for spec in (load_model(name),)
    )
    return Report(title="Built-in models", rows=rows, notes=(TOTAL_NOTE,))


def architecture_terms(spec: ModelSpec) -> tuple[Term, ...]:
    """The fields that shape the weights, as resolved by ModelSpec (KV heads, head_dim, ...)."""
    terms = [
        _config("model_type", "model type", spec.model_type, Unit.text),
        _config("hidden_size", "hidden size", spec.hidden_size),
        _config("num_hidden_layers", "layers", spec.num_hidden_layers),
        _config("full_attention_layers", "full-attention layers", spec.full_attention_layers),
        _config("num_attention_heads", "query heads", spec.num_attention_heads),
        _config("num_key_value_heads", "KV heads", spec.kv_heads),
        _config("head_dim", "head dim (q·k)", spec.head_dim_resolved),
        _config("intermediate_size", "MLP intermediate", spec.intermediate_size),
        _config("vocab_size", "vocab", spec.vocab_size),
        _config("tie_word_embeddings", "tied embedding", spec.tie_word_embeddings, Unit.text),
    ]
    if spec.linear_attention_layers:
        terms.append(_config("linear_attention_layers", "linear-attention layers",
                             spec.linear_attention_layers))  # fmt: skip
    if spec.is_moe:
        terms += [
            _config("moe_layers", "MoE layers", spec.moe_layers),
            _config("n_routed_experts", "routed experts", spec.n_routed_experts),
            _config("num_experts_per_tok", "experts per token", spec.num_experts_per_tok),
            _config("moe_intermediate_size", "expert intermediate", spec.moe_intermediate_size),
        ]
    if spec.mtp_layers:
        terms.append(_config("mtp_layers", "MTP modules", spec.mtp_layers))
    terms.append(_config("seq_length", "seq length", spec.seq_length))
    return tuple(terms)


def show_report(model: str) -> Report:
    """One model: its architecture, then the parameter breakdown of tpcalc.calc.params.counts."""
    spec = load_model(model)
    row = Row(
        inputs={"model": spec.name, "name": spec.tpcalc.display_name or spec.name},
        terms=(*architecture_terms(spec), *param_terms(spec)),
    )
    notes = (
        [f"seq length: {spec.tpcalc.seq_length_source}"] if spec.tpcalc.seq_length_source else []
    )
    if spec.tpcalc.dropout is not None:
        state = "on" if spec.tpcalc.dropout else "off"
        notes.append(f"dropout {state} by default: {spec.tpcalc.dropout_source}")
    notes += [spec.tpcalc.notes] if spec.tpcalc.notes else []
    return Report(title=f"{row.inputs['name']}", rows=(row,), notes=(*notes, TOTAL_NOTE))
