"""Held-out text for perplexity: does distillation on one task damage language modelling?

A short built-in set of plain English passages (written for mechscope, no licence
constraints) so the check runs anywhere; a user can point ``eval.perplexity_text`` at a
``.txt`` file instead (passages separated by blank lines).
"""

from __future__ import annotations

from pathlib import Path

from mechscope.errors import InputError

PASSAGES: tuple[str, ...] = (
    "The river runs through the middle of the town, and in summer the children swim near the "
    "old stone bridge while their parents sit in the shade of the trees.",
    "She opened the letter slowly, read the first line twice, and then put it back in the "
    "envelope without saying a word to anyone in the room.",
    "Bread is made from flour, water, salt and yeast. The dough is left to rise for a few hours "
    "before it is shaped and baked in a hot oven.",
    "The train was late again, so the station was crowded with people who checked their phones "
    "and looked down the empty track every few minutes.",
    "In the winter the lake freezes over, and on clear mornings you can hear the ice crack as "
    "the sun begins to warm the surface.",
    "My grandfather kept a small garden behind the house where he grew tomatoes, beans and a "
    "few rows of potatoes every year.",
    "The museum opens at nine in the morning and closes at five in the evening, except on "
    "Mondays, when it is closed all day.",
    "After the meeting, the team decided to test the new design on a small group of users "
    "before making any further changes.",
    "The cat jumped onto the windowsill, stretched in the warm light, and fell asleep while the "
    "rain tapped softly against the glass.",
    "Most birds build their nests in spring. Some use twigs and grass, while others prefer mud, "
    "feathers or even bits of string.",
    "He walked to the library to return his books, but the doors were locked, so he left them "
    "in the box by the entrance.",
    "The recipe calls for two eggs, a cup of sugar and a little butter, mixed together until "
    "the batter is smooth and light.",
    "When the storm passed, the streets were covered with leaves and broken branches, and the "
    "neighbours came out to help clear them away.",
    "The teacher asked the class to write a short story about a journey, and most of the "
    "students chose to write about a trip to the sea.",
    "A map of the old city shows narrow streets that wind between the market square, the "
    "church and the harbour.",
    "They planted the trees in a long line along the road, hoping that in ten years there "
    "would be shade for anyone walking by.",
)


def load_passages(path: str | Path | None = None) -> list[str]:
    """The built-in passages, or the blank-line-separated passages of a text file."""
    if path is None:
        return list(PASSAGES)
    p = Path(path)
    if not p.is_file():
        raise InputError(
            f"expected an existing text file, got {str(p)!r}", field="eval.perplexity_text"
        )
    passages = [b.strip() for b in p.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    if not passages:
        raise InputError(
            "expected at least one non-empty passage", sample=p.name, field="eval.perplexity_text"
        )
    return passages
