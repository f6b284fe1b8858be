"""Which architectures mechscope supports, measured on tiny models rather than claimed.

For a ``model_type`` of the installed transformers, :func:`support_row` builds a tiny random
model from the family's own config class and modeling code, loads it as a user's model would
be loaded (built-in card, or one derived from the module tree; a multimodal type without
prefix reuse, as with its processor) and runs the conformance probe. The row says whether
every check holds, how prefix resume and generation run, what is refused (by the probe and
by the engine itself) and why, or why the family is refused as a whole, and which config it
measured. Tiny configs exercise what the family's real checkpoints use
(:mod:`mechscope.models.tiny_types`, ``tiny_overrides.yaml``): every sliding window and
attention chunk is 8 tokens long, so the probe's 10-token input runs past it, ALiBi is on,
and convolution layers, shared experts and dense layers beside mixture-of-experts ones are
kept. A row that claimed more than its family does came from a config without the feature
(lfm2 without convolution layers, granitemoeshared without its shared MLP).
``mechscope models --support`` prints these rows; the table in docs/engine.md is generated
from them (``scripts/support_table.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mechscope.engine.conformance.probe import ProbeReport, apply_probe
from mechscope.engine.core.spans import SPAN_ATTRIBUTES, attention_span, uses_alibi
from mechscope.engine.generation.batching import LOCKSTEP
from mechscope.engine.interventions.forward import Forward
from mechscope.errors import MechscopeError
from mechscope.models.loading import load_tiny_type
from mechscope.models.modal import RESUME_REFUSAL, modality
from mechscope.models.tiny import tiny_tokenizer
from mechscope.models.tiny_types import tiny_config


@dataclass(frozen=True)
class SupportRow:
    """One architecture: ``status`` is ``exact`` (every check holds, resume and generation
    included), ``partial`` (exact, some interventions refused), ``refused`` (no card passes
    the probe) or ``not built`` (no tiny model). ``resume``: ``exact``, ``below window``
    (sequences shorter than the window or chunk; longer ones are recomputed), ``recomputed``
    (never resumed: a layer kind of unknown reach) or ``refused``. ``generation``:
    ``exact`` (continuous batching and lock step both equal transformers' ``generate``),
    ``lock step`` (only lock step does; rollouts decode that way) or ``refused``."""

    model_type: str
    status: str
    card: str
    resume: str = "—"
    generation: str = "—"
    refused: tuple[str, ...] = ()
    note: str = ""
    config: str = "—"  # what the measured tiny config exercises

    def markdown(self) -> str:
        refused = ", ".join(self.refused) or "—"
        cells = (self.status, self.card, self.resume, self.generation, refused, self.note)
        return f"| `{self.model_type}` | {' | '.join(cells)} | {self.config} |"


HEADER = (
    "| model_type | status | card | resume | generation | refused | why | config |\n"
    "|---|---|---|---|---|---|---|---|"
)


def _why(refused: dict[str, str]) -> str:
    return _short("; ".join(sorted(set(refused.values()))), 200)


def support_row(model_type: str) -> SupportRow:
    """Load the tiny ``model_type`` and probe it (a few seconds at most)."""
    try:
        lm = load_tiny_type(model_type)
    except MechscopeError as exc:
        status = "refused" if "card" in str(exc) else "not built"
        config = describe_config(model_type) if status == "refused" else "—"
        return SupportRow(model_type, status, "—", note=_short(str(exc)), config=config)
    except Exception as exc:  # the family's own modeling code fails on a tiny config
        return SupportRow(model_type, "not built", "—", note=_short(f"{type(exc).__name__}: {exc}"))
    config = describe(lm)
    if modality(lm.model.config) is not None:  # loaded with its processor, as users do
        lm.refused.setdefault("resume", RESUME_REFUSAL)
    try:  # every card is probed here, built-in ones too (the engine probes derived ones)
        eng = Forward(lm)
        report = apply_probe(eng)
    except MechscopeError as exc:
        return SupportRow(
            model_type, "refused", lm.card_source, note=_short(str(exc)), config=config
        )
    failed = [n for n, result in report.results.items() if result.startswith("failed")]
    card = lm.card.family if lm.card_source == "built-in" else lm.card_source
    if set(failed) - {"slots"} and not lm.refused:
        note = f"probe failed: {', '.join(failed)}"
        return SupportRow(model_type, "refused", card, note=note, config=config)
    resume, generation = _resume(lm, report), _generation(lm, report)
    proven = resume in ("exact", "below window") and generation in ("exact", "lock step")
    refused = {**engine_gaps(lm, eng.refusals), **lm.refused}
    status = "exact" if proven and not refused else "partial"
    names = tuple(sorted(refused))
    return SupportRow(model_type, status, card, resume, generation, names, _why(refused), config)


def engine_gaps(lm, refusals: dict[str, str]) -> dict[str, str]:
    """What the engine refuses on its own that the family has: not the sites its
    architecture lacks (experts of a dense model, ``resid_mid`` of a parallel block, the
    single MLP of a model whose every layer is a mixture of experts), but the router of
    experts it cannot call, an activation or norm the card does not name."""
    moe = moe_layers(lm)
    every = len(moe) == lm.n_layers  # no layer with one MLP
    lacks = {
        "router": not moe,
        "expert_out": not moe,
        "resid_mid": lm.parallel,
        "mlp_pre": every,
        "mlp_post": every,
    }
    return {name: why for name, why in refusals.items() if not lacks.get(name, False)}


def moe_layers(lm) -> list[int]:
    """Layers holding a mixture of experts (a module named like one)."""
    return [
        l
        for l, layer in enumerate(lm.layers())
        if any(_MOE.search(type(m).__name__) for m in layer.modules())
    ]


def describe(lm) -> str:
    """What the tiny config exercises, for its row: layer kinds, windows and chunks,
    ALiBi, experts and the layers that hold them, shared experts."""
    parts = _config_parts(lm.config, lm.n_layers)
    moe = moe_layers(lm)
    if moe:
        where = "every layer" if len(moe) == lm.n_layers else f"layer {', '.join(map(str, moe))}"
        shared = any("shared" in name.lower() for name, _ in lm.layers()[moe[0]].named_modules())
        parts.append(f"experts on {where}{' + shared' if shared else ''}")
    return "; ".join(parts)


def describe_config(model_type: str) -> str:
    """:func:`describe` of a tiny config whose model could not be loaded (no card to find
    its layers by): what the config declares, experts included."""
    try:
        tok = tiny_tokenizer()
        config = tiny_config(model_type, len(tok), {})
    except Exception:  # the family's own config class fails on a tiny config
        return "—"
    config = getattr(config, "text_config", None) or config
    n = next((getattr(config, k) for k in _LAYER_COUNTS if hasattr(config, k)), "?")
    parts = _config_parts(config, n)
    if any(_positive(config, k) for k in _EXPERT_COUNTS):
        shared = any(_positive(config, k) for k in _SHARED_SIZES)
        parts.append(f"experts{' + shared' if shared else ''}")
    return "; ".join(parts)


def _config_parts(config, n_layers: object) -> list[str]:
    parts = [f"{n_layers} layers"]
    kinds = getattr(config, "layer_types", None)
    if isinstance(kinds, list | tuple) and len(set(map(str, kinds))) > 1:
        parts[0] += f" ({', '.join(map(str, kinds))})"
    if attention_span(config) is not None:  # a window or chunk some layer uses
        parts += [f"{n} {getattr(config, n)}" for n in SPAN_ATTRIBUTES if _set(config, n)]
    if uses_alibi(config):
        parts.append("ALiBi")
    return parts


_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers")
_EXPERT_COUNTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_SHARED_SIZES = (
    "shared_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts",
    "num_shared_experts", "moe_num_shared_experts", "shared_experts_intermediate_size",
)  # fmt: skip


def _positive(config, name: str) -> bool:
    value = getattr(config, name, None)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


_MOE = re.compile(r"moe|sparse|expert", re.IGNORECASE)


def _set(config, name: str) -> bool:
    value = getattr(config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return False
    return not (name == "sliding_window" and getattr(config, "use_sliding_window", True) is False)


def _resume(lm, report: ProbeReport) -> str:
    if "resume" in lm.refused:
        return "refused"
    if not report.results.get("resume", "").startswith("ok"):
        return "—" if not lm.causal else "recomputed"
    return "exact" if attention_span(lm.config) is None else "below window"


def _generation(lm, report: ProbeReport) -> str:
    if "generate" in lm.refused:
        return "refused"
    if not report.results.get("generate", "").startswith("ok"):
        return "—"
    return "lock step" if LOCKSTEP in lm.extra else "exact"


def _short(text: str, limit: int = 160) -> str:
    line = text.splitlines()[0] if text else ""
    line = line.replace("|", "/")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def support_table(rows: list[SupportRow]) -> str:
    """The markdown table of ``rows``."""
    return "\n".join([HEADER, *(row.markdown() for row in rows)])
