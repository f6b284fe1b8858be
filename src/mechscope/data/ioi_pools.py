"""Word pools and templates for the IOI task (Wang et al., 2023 style).

Templates are written in ABBA order with fields ``{A}`` and ``{B}`` (the two names of the
opening clause), ``{S2}`` (the subject's second mention), ``{PLACE}`` and ``{OBJECT}``; the
prompt stops right before the indirect object, which the model must predict. BABA order
swaps which of ``{A}``/``{B}`` is the indirect object. No template starts with a name, so
every name follows a space and tokenizes like the answer (``" Mary"``).

Pools are plain lists: callers pass their own (e.g. one per tokenizer family), and
:func:`mechscope.data.tokens.filter_single_token_names` keeps the single-token ones.
"""

from __future__ import annotations

NAMES: tuple[str, ...] = (
    "Mary",
    "John",
    "Tom",
    "James",
    "Michael",
    "David",
    "Robert",
    "William",
    "Richard",
    "Thomas",
    "Daniel",
    "Paul",
    "Mark",
    "George",
    "Kevin",
    "Brian",
    "Jason",
    "Jeff",
    "Ryan",
    "Eric",
    "Adam",
    "Peter",
    "Steve",
    "Frank",
    "Scott",
    "Andrew",
    "Alex",
    "Ben",
    "Sam",
    "Jack",
    "Lily",
    "Tim",
    "Sarah",
    "Lisa",
    "Laura",
    "Anna",
    "Emma",
    "Kate",
    "Amy",
    "Rachel",
    "Jessica",
    "Jennifer",
    "Linda",
    "Susan",
    "Karen",
    "Nancy",
    "Helen",
    "Alice",
    "Rose",
    "Grace",
)

# Held-out names for the "unseen names" OOD variant: disjoint from NAMES.
HELDOUT_NAMES: tuple[str, ...] = (
    "Oliver",
    "Henry",
    "Oscar",
    "Felix",
    "Hugo",
    "Leo",
    "Victor",
    "Martin",
    "Simon",
    "Carl",
    "Dean",
    "Roger",
    "Ruth",
    "Julia",
    "Clara",
    "Sophie",
    "Diana",
    "Monica",
    "Claire",
    "Joan",
    "Timmy",
    "Ellen",
    "Nina",
    "Vera",
)

PLACES: tuple[str, ...] = (
    "store",
    "park",
    "school",
    "beach",
    "market",
    "garden",
    "restaurant",
    "station",
    "library",
    "office",
    "hospital",
    "museum",
    "house",
    "river",
    "farm",
    "zoo",
    "lake",
    "church",
)

# Objects start with a consonant so that "a {OBJECT}" reads naturally.
OBJECTS: tuple[str, ...] = (
    "drink",
    "book",
    "ring",
    "bone",
    "kiss",
    "basketball",
    "computer",
    "necklace",
    "snack",
    "letter",
    "ball",
    "pencil",
    "flower",
    "cake",
    "hat",
    "card",
    "bottle",
    "toy",
)

TEMPLATES: tuple[str, ...] = (
    "When {A} and {B} went to the {PLACE}, {S2} gave a {OBJECT} to",
    "Then, {A} and {B} went to the {PLACE}. {S2} gave a {OBJECT} to",
    "Then, {A} and {B} had a lot of fun at the {PLACE}. {S2} gave a {OBJECT} to",
    "Then, {A} and {B} were working at the {PLACE}. {S2} decided to give a {OBJECT} to",
    "Then, {A} and {B} were thinking about going to the {PLACE}. {S2} wanted to give a {OBJECT} to",
    "After {A} and {B} went to the {PLACE}, {S2} gave a {OBJECT} to",
    "When {A} and {B} got a {OBJECT} at the {PLACE}, {S2} decided to give it to",
    "While {A} and {B} were working at the {PLACE}, {S2} gave a {OBJECT} to",
    "While {A} and {B} were commuting to the {PLACE}, {S2} gave a {OBJECT} to",
    "After the lunch, {A} and {B} went to the {PLACE}. {S2} gave a {OBJECT} to",
    "Afterwards, {A} and {B} went to the {PLACE}. {S2} gave a {OBJECT} to",
    "The {PLACE} {A} and {B} went to had a {OBJECT}. {S2} gave it to",
    "Friends {A} and {B} found a {OBJECT} at the {PLACE}. {S2} gave it to",
    "When {A} and {B} arrived at the {PLACE}, {S2} showed a {OBJECT} to",
    "Later, {A} and {B} walked to the {PLACE}. {S2} brought a {OBJECT} to",
    "When {A} and {B} met at the {PLACE}, {S2} sold a {OBJECT} to",
    "Once {A} and {B} reached the {PLACE}, {S2} handed a {OBJECT} to",
    "After {A} and {B} left the {PLACE}, {S2} sent a {OBJECT} to",
)

# Other sentence shapes for the "new templates" OOD variant (no overlap with TEMPLATES).
OOD_TEMPLATES: tuple[str, ...] = (
    "Yesterday, {A} and {B} cleaned the {PLACE} together. Later, {S2} passed a {OBJECT} to",
    "Both {A} and {B} were early at the {PLACE}, so {S2} offered a {OBJECT} to",
    "During the party at the {PLACE}, {A} and {B} talked for hours. Then {S2} threw a {OBJECT} to",
    "It was late when {A} and {B} left the {PLACE}, and {S2} lent a {OBJECT} to",
    "Because {A} and {B} were hungry at the {PLACE}, {S2} bought a {OBJECT} for",
    "At the {PLACE}, {A} sat next to {B}. After a while, {S2} gave a {OBJECT} to",
)

# Prefix sentences for the "long context" OOD variant (prepended with a space).
PREFIXES: tuple[str, ...] = (
    "It was a quiet morning and the weather was warm and bright.",
    "The town had been busy all week because of the summer festival.",
    "Nobody expected anything unusual to happen on that ordinary day.",
    "Everyone in the neighbourhood knew each other well after many years.",
    "The sky was grey, and a light rain had been falling since dawn.",
)
