"""The model commands: ``models`` (aliases, cards, measured support), ``inspect`` (one model,
its card and what the probe found) and ``card`` (a model's card as YAML to edit and keep)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from mechscope.cli.model_options import model_options
from mechscope.errors import MechscopeError
from mechscope.models.options import ModelOptions

console = Console()


def models(
    support: list[str] = typer.Option(
        None,
        "--support",
        help="Build tiny random models of these transformers model types (or 'named' for the "
        "families researchers use most) and show what mechscope does with each.",
    ),
) -> None:
    """List model aliases and cards; with --support, measure support on tiny models."""
    from mechscope.models import ALIASES, DEFAULT_MODEL, all_cards

    if support:
        _support(support)
        return
    table = Table(title="aliases")
    table.add_column("alias")
    table.add_column("source")
    for alias, source in ALIASES.items():
        default = " (default)" if alias == DEFAULT_MODEL else ""
        table.add_row(alias + default, source.describe())
    console.print(table)
    cards = Table(title="built-in model cards")
    for col in ("family", "config.model_type", "causal", "auto class"):
        cards.add_column(col)
    for family, card in sorted(all_cards().items()):
        cards.add_row(family, ", ".join(card.model_types), str(card.causal), card.auto_class)
    console.print(cards)
    console.print(
        "Any other decoder: a card is derived from the model and checked by the conformance "
        "probe when it loads (mechscope models --support TYPE tries one on a tiny model).\n"
        "Specs: a local HF directory, a .gguf file, an alias, tiny:<family|model_type>."
    )


def _support(types: list[str]) -> None:
    from mechscope.engine.conformance.support import support_row
    from mechscope.models.tiny_types import NAMED_TYPES

    table = Table(title="support measured on tiny random models")
    for col in ("model_type", "status", "card", "resume", "generation", "refused", "why", "config"):
        table.add_column(col, overflow="fold")
    for model_type in NAMED_TYPES if types == ["named"] else types:
        row = support_row(model_type)
        table.add_row(
            row.model_type, row.status, row.card, row.resume, row.generation,
            ", ".join(row.refused), row.note, row.config,
        )  # fmt: skip
    console.print(table)


@model_options
def inspect(
    probe: bool = typer.Option(False, "--probe", help="Run the conformance probe and show it."),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Layers, heads, sites, dtype, parameter count, card and probe of a model."""
    from mechscope.engine import SITE_NAMES, Engine
    from mechscope.engine.conformance.probe import apply_probe

    lm = opts.load()
    eng = Engine.of(lm)  # probes a derived or user card; refuses one that fails
    report = lm.extra.get("probe") or (apply_probe(eng) if probe else None)
    table = Table(title=opts.model, show_header=False)
    for key, value in lm.describe().items():
        table.add_row(key, f"{value:,}" if isinstance(value, int) and value > 9999 else str(value))
    table.add_row("card", f"{lm.card.family} ({lm.card_source})")
    refused = {**eng.refusals, **lm.refused}  # what the pass checks refuse, and why
    table.add_row("sites", ", ".join(n for n in SITE_NAMES if n not in refused))
    for name, reason in sorted(refused.items()):
        table.add_row(f"refused: {name}", reason)
    if report is not None:
        for name, result in report.results.items():
            if name in report.margins:  # how close it came: its error over its tolerance
                result += f" (error {report.margins[name]:.2g} of the rounding tolerance)"
            table.add_row(f"probe: {name}", result)
    console.print(table)


@model_options
def card(
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the YAML here."),
    derive: bool = typer.Option(
        True, "--derive/--current", help="Derive it from the model, or show the card in use."
    ),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """A model's card as YAML: edit it, put it in $MECHSCOPE_CARDS, and it is used (and
    probed) whenever a model of that type loads."""
    from mechscope.engine import Engine
    from mechscope.models.card import card_yaml

    lm = (replace(opts, card="derive") if derive else opts).load()
    try:
        Engine.of(lm)
        verdict = "passes the conformance probe"
    except MechscopeError as exc:  # still worth writing: the user fixes the site it names
        verdict = f"FAILS the conformance probe: {exc}"
    text = card_yaml(lm.card)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    where = f"{out}; put its folder in $MECHSCOPE_CARDS" if out else "above"
    Console(stderr=True).print(f"card of family {lm.card.family} ({where}): {verdict}")
