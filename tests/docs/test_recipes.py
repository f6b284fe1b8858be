"""Every mechscope block of the recipes page runs on the real model (smollm2-135m), each in
a fresh namespace after the page's setup, and its own ``assert`` lines hold; the page has
at least 15 recipes, each with a TransformerLens, an nnsight and a mechscope block, and its
line-count table is the one the blocks give. The peers' blocks run too (slow) where
TransformerLens 4 or nnsight 0.8 is installed, on the same weights."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import linecache

import pytest
from recipes_page import LIBRARIES, PAGE, assigned_names, page_table, recipes, setups, table

TEXT = PAGE.read_text()
RECIPES = recipes(TEXT)
#: Recipes that take more than a few seconds on 2 CPU cores (sweeps, a second model).
SLOW = {"Patching sweep: every layer × position", "bf16 on the GPU, metrics in fp32"}
HUB_NAME = "HuggingFaceTB/SmolLM2-135M"


def run_block(code: str, name: str, namespace: dict) -> None:
    """Execute one block under ``name``, its source registered in ``linecache`` (tracebacks
    show the page's lines; nnsight reads a ``with`` block's body back from there)."""
    linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
    exec(compile(code, name, "exec"), namespace)


def test_the_page_has_15_recipes_each_with_three_blocks() -> None:
    assert len(RECIPES) >= 15
    assert [r.number for r in RECIPES] == list(range(1, len(RECIPES) + 1))
    for r in RECIPES:
        assert sorted(r.blocks) == sorted(LIBRARIES), (r.number, r.title)
    assert sorted(setups(TEXT)) == sorted(LIBRARIES)


def test_the_line_count_table_is_current() -> None:
    assert page_table(TEXT) == table(TEXT), "run: python tests/docs/recipes_page.py"


@pytest.fixture(scope="module")
def setup_namespace() -> dict:
    """The mechscope setup run once: the model, the engine, the prompts, the vector."""
    from mechscope.errors import ModelSpecError

    namespace: dict = {}
    try:
        run_block(setups(TEXT)["mechscope"], f"{PAGE.name}:mechscope setup", namespace)
    except ModelSpecError as exc:
        pytest.skip(str(exc))
    return namespace


def _params() -> list:
    return [
        pytest.param(r, id=f"{r.number}", marks=[pytest.mark.slow] if r.title in SLOW else [])
        for r in RECIPES
    ]


@pytest.mark.parametrize("recipe", _params())
def test_mechscope_recipe_runs(recipe, setup_namespace: dict, capsys) -> None:
    namespace = dict(setup_namespace)  # a fresh namespace: nothing leaks between recipes
    before = set(namespace)
    code = recipe.blocks["mechscope"]
    run_block(code, f"{PAGE.name}:mechscope {recipe.number}", namespace)
    assert set(namespace) - before or capsys.readouterr().out, "the recipe left no result"
    assert assigned_names(code) <= set(namespace)


#: library -> (package, distribution, the first major.minor the page is written for)
PEERS = {
    "transformerlens": ("transformer_lens", "transformer-lens", (4, 0)),
    "nnsight": ("nnsight", "nnsight", (0, 8)),
}


def peer_skip(library: str) -> str | None:
    """Why a peer's blocks cannot run here (None: they can)."""
    package, dist, first = PEERS[library]
    if importlib.util.find_spec(package) is None:
        return f"{package} is not installed here"
    version = importlib.metadata.version(dist)
    if tuple(int(x) for x in version.split(".")[:2]) < first:
        return f"the page is written for {dist} {'.'.join(map(str, first))}+, not {version}"
    return None


@pytest.fixture(scope="module", params=sorted(PEERS))
def peer_namespace(request) -> tuple[str, str, dict]:
    """A peer's setup on the converted smollm2 directory (its hub name replaced by it)."""
    library = request.param
    why = peer_skip(library)
    if why is not None:
        pytest.skip(why)
    smollm2 = request.getfixturevalue("smollm2")  # loaded only where a peer can run
    local = str(smollm2.model.name_or_path)
    namespace: dict = {}
    setup = setups(TEXT)[library].replace(HUB_NAME, local)
    run_block(setup, f"{PAGE.name}:{library} setup", namespace)
    return library, local, namespace


@pytest.mark.slow
@pytest.mark.parametrize("recipe", _params())
def test_peer_recipe_runs(recipe, peer_namespace) -> None:
    import torch

    library, local, setup = peer_namespace
    code = recipe.blocks[library].replace(HUB_NAME, local)
    if "sae_lens" in code and importlib.util.find_spec("sae_lens") is None:
        pytest.skip("sae_lens is not installed (SAELens 6 needs TransformerLens < 4)")
    if not torch.cuda.is_available():  # the bf16 recipe on the CPU
        code = code.replace('"cuda"', '"cpu"')
    namespace = dict(setup)
    run_block(code, f"{PAGE.name}:{library} {recipe.number}", namespace)
    missing = sorted(n for n in assigned_names(code) if n not in namespace)
    assert not missing, f"{library} recipe {recipe.number} left {missing} unbound"
