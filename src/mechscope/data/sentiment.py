"""Sentiment contrast, generated: the classic steering demo (ActAdd's "Love" − "Hate",
contrastive activation addition's mean difference over pairs).

:func:`sentiment_pairs` gives sentence pairs that differ only in one evaluative word
(``"The food was wonderful"`` / ``"The food was terrible"``); their mean activation
difference at the last token is a sentiment direction. :func:`sentiment_prompts` gives
neutral prompts to steer, scored by the logit difference of a positive and a negative
next word (``" good"`` − ``" bad"``) and continued greedily.
"""

from __future__ import annotations

import itertools
import random

SUBJECTS = (
    "The food", "The movie", "The weather", "The book", "The hotel", "The service",
    "The concert", "The game", "The trip", "The party", "The class", "The show",
)  # fmt: skip
WORDS = (
    ("wonderful", "terrible"), ("great", "awful"), ("excellent", "horrible"),
    ("lovely", "dreadful"), ("fantastic", "miserable"), ("delightful", "disgusting"),
    ("amazing", "disappointing"), ("pleasant", "unpleasant"),
)  # fmt: skip
PROMPTS = (
    "I think the movie was",
    "My opinion of the food is that it was",
    "Honestly, the weather today is",
    "The new restaurant in town is",
    "Overall, I would say the trip was",
    "My week so far has been",
    "The book I read yesterday was",
    "Everyone agreed that the party was",
)
POSITIVE, NEGATIVE = " good", " bad"


def sentiment_pairs(n: int, *, seed: int = 0) -> list[dict[str, str]]:
    """``n`` pairs ``{"id", "positive", "negative"}`` (subject × word pair, shuffled)."""
    grid = [(subject, pos, neg) for subject, (pos, neg) in itertools.product(SUBJECTS, WORDS)]
    random.Random(seed).shuffle(grid)
    return [
        {"id": f"sentiment-{i:03d}", "positive": f"{s} was {p}", "negative": f"{s} was {q}"}
        for i, (s, p, q) in enumerate(grid[:n])
    ]


def sentiment_prompts() -> list[dict[str, str]]:
    """Neutral prompts ``{"id", "prompt", "target", "versus"}`` to steer."""
    return [
        {"id": f"prompt-{i}", "prompt": p, "target": POSITIVE, "versus": NEGATIVE}
        for i, p in enumerate(PROMPTS)
    ]
