"""Logit lens over every layer of a 512-token text: mechscope vs TransformerLens and tuned-lens.

Each side reads the residual stream before every layer and after the last, through the
model's own final norm and unembedding, and returns the NLL of each next token at every
layer: ``[layers + 1, tokens - 1]``.

- mechscope: one ``Engine.run`` with a ``Read`` of every ``resid_pre`` (the last row is the
  model's own logits), then ``lens_nll`` on every layer's scored positions stacked, 512 rows
  per unembedding whatever layer they come from (at 64 tokens, one layer's rows make too
  thin a product): never more than ``[512, vocab]`` at a time;
- TransformerLens 4: ``run_with_cache`` (residual hooks only), ``accumulated_resid(
  apply_ln=True)`` (``ln_final`` recomputed per state), ``unembed``, ``log_softmax``: the
  textbook logit lens, holding ``[layers + 1, tokens, vocab]``. The ``TransformerBridge``
  wraps a copy of the same weights, as ``bench_patching.py`` builds it (TL cannot load
  SmolLM2 by name offline);
- tuned-lens 0.2: ``LogitLens.from_model`` on the Hugging Face model, applied to
  ``hidden_states[:-1]`` of an ``output_hidden_states=True`` forward plus the model's logits
  (its own convention: HF's last hidden state is already normalised). It probes for
  TransformerLens' ``HookedTransformer``, which TransformerLens 4 turns into an ImportError,
  so the script tells it TransformerLens is absent (the model is a Hugging Face one).

Time interleaved in one process, peak memory in a fresh process per side. Agreement: every
NLL within what rounding explains (``K · eps · scale · √depth``, mechscope.tolerance) at a
log-probability's scale (the lens logits' largest magnitude twice, plus log(vocab)) through
every layer: TransformerLens 4 runs the Hugging Face modules with eager attention, tuned-lens
reads HF's.
Run: ``python benchmarks/bench_logit_lens.py [--quick] [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from mechscope.engine import Engine, Read, Site
from mechscope.lens import lens_nll
from mechscope.models import DEFAULT_MODEL, LoadedModel, load_model
from mechscope.tolerance import logprob_scale

PEER_VENV = True
MODEL = DEFAULT_MODEL
N_TOKENS = 512
TARGET = 1.0
PEERS = {"tl": "TransformerLens accumulated_resid + unembed", "tuned": "tuned-lens LogitLens"}


def text_ids(tokenizer: Any, n: int) -> torch.Tensor:
    """``[1, n]`` token ids of real text: HumanEval prompts and solutions, cut at ``n``."""
    from mechscope.data.humaneval import load_humaneval_problems

    text = ""
    for task in load_humaneval_problems().values():
        text += task.prompt + task.solution + "\n\n"
        ids = tokenizer(text, add_special_tokens=False).input_ids
        if len(ids) >= n:
            return torch.tensor([ids[:n]])
    raise SystemExit(f"HumanEval has fewer than {n} tokens")


def _nll(logprobs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``logprobs [..., T, V]`` → NLL of each next token ``[..., T - 1]`` (fp32)."""
    nxt = ids[0, 1:].expand(*logprobs.shape[:-2], -1)[..., None]  # [..., T-1, 1]
    return -logprobs[..., :-1, :].gather(-1, nxt)[..., 0].float()


def lens_ours(lm: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    eng = Engine.of(lm)
    sites = [Site("resid_pre", layer) for layer in range(lm.n_layers)]
    out = eng.run(ids, [Read(s) for s in sites])
    h = torch.cat([out[s][0, :-1] for s in sites])  # [L · (T - 1), d]: every scored row
    nxt = ids[0, 1:].repeat(len(sites))  # [L · (T - 1)]
    # 512 rows per unembedding whatever layer they come from: [512, vocab] is 100 MB
    rows = lens_nll(eng, h, nxt, chunk=N_TOKENS).view(len(sites), -1)  # [L, T - 1]
    last = _nll(torch.log_softmax(out.logits[0].float(), -1)[None], ids)  # [1, T - 1]
    return torch.cat([rows, last])  # [L + 1, T - 1]


def nll_scale(lm: LoadedModel, ids: torch.Tensor) -> float:
    """The scale at which the lens' NLLs are rounded: a log-probability's, from the largest
    |logit| of the lens of every layer (one layer's ``[tokens, vocab]`` at a time)."""
    eng = Engine.of(lm)
    sites = [Site("resid_pre", layer) for layer in range(lm.n_layers)]
    out = eng.run(ids, [Read(s) for s in sites])
    top = max(float(eng.unembed(out[s]).abs().max()) for s in sites)
    return logprob_scale(max(top, float(out.logits.abs().max())), lm.vocab_size)


def check(lm: LoadedModel, ids: torch.Tensor, ours: Any, peer: Any) -> harness.Agreement:
    """Every NLL of every layer, up to rounding through the whole pass."""
    scale = nll_scale(lm, ids)
    return harness.agreement(ours, peer, depth=lm.n_layers + 1, scale=scale, name="nll")


def lens_reference(hf_model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """A peer-free dense logit lens on the HF model (the check the unit tests run)."""
    with torch.no_grad():
        res = hf_model(input_ids=ids, output_hidden_states=True, use_cache=False)
        norm, head = hf_model.base_model.norm, hf_model.get_output_embeddings()
        z = [head(norm(h)) for h in res.hidden_states[:-1]] + [res.logits]
        return _nll(torch.log_softmax(torch.stack(z).float(), -1), ids)[:, 0]  # [L+1, T-1]


def build_peer(name: str, lm: LoadedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """The peer's logit lens as a function of the token ids (imports the peer package)."""
    if name == "tl":
        from bench_patching import build_tl

        model = build_tl(lm)

        def tl(ids: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                _, cache = model.run_with_cache(ids, names_filter=lambda n: "resid_p" in n)
                stack = cache.accumulated_resid(apply_ln=True)  # [L+1, 1, T, d]
                return _nll(torch.log_softmax(model.unembed(stack), -1), ids)[:, 0]

        return tl
    import tuned_lens.model_surgery
    from tuned_lens.nn import LogitLens

    # tuned-lens 0.2 asks whether the model is a transformer_lens.HookedTransformer, a name
    # TransformerLens 4 turns into an ImportError; this model is a Hugging Face one
    tuned_lens.model_surgery._transformer_lens_available = False
    hf = lm.model
    hf.set_attn_implementation("sdpa")
    lens = LogitLens.from_model(hf)

    def tuned(ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            res = hf(input_ids=ids, output_hidden_states=True, use_cache=False)
            z = [lens(h, i) for i, h in enumerate(res.hidden_states[:-1])] + [res.logits]
            return _nll(torch.log_softmax(torch.stack(z).float(), -1), ids)[:, 0]

    return tuned


def peer_case(name: str, n_tokens: int, reps: int, threads: int) -> harness.Case:
    label = f"logit lens, all layers, {n_tokens} tokens"
    lm = load_model(MODEL)
    ids = text_ids(lm.tokenizer, n_tokens)
    try:
        peer = build_peer(name, load_model(MODEL))
    except Exception as exc:  # the peer could not load this model: a row that says why
        return harness.unavailable(label, PEERS[name], f"{type(exc).__name__}: {exc}"[:200])
    variants = {"ours": lambda: lens_ours(lm, ids), name: lambda: peer(ids)}
    print(f"logit lens vs {PEERS[name]}, {n_tokens} tokens", file=sys.stderr, flush=True)
    t = harness.interleaved(variants, reps=reps)
    agree = check(lm, ids, t.last["ours"], t.last[name])
    t.last.clear()
    lm = peer = None  # free both models before the memory children load theirs
    mem = {v: harness.peak_in_child(__file__, v, threads, tokens=n_tokens) for v in ("ours", name)}
    return harness.case_from_check(
        t,
        "ours",
        name,
        agree,
        case=label,
        peer_label=PEERS[name],
        target=TARGET,
        mem_ours_mb=mem["ours"]["peak_mb"],
        mem_peer_mb=mem[name]["peak_mb"],
        note=f"peak RSS beyond the model {mem['ours']['beyond_mb']:.0f} MB vs "
        f"{mem[name]['beyond_mb']:.0f} MB",
        extra={"memory": mem},
    )


def mem_child(variant: str, n_tokens: int) -> dict[str, Any]:
    lm = load_model(MODEL)
    ids = text_ids(lm.tokenizer, n_tokens)
    fn = (lambda x: lens_ours(lm, x)) if variant == "ours" else build_peer(variant, lm)
    return harness.peak_of(lambda: fn(ids), warmup=lambda: fn(ids[:, :16]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 tokens, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--mem-child", choices=("ours", *PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=int, default=N_TOKENS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mem_child:
        result = mem_child(args.mem_child, args.tokens)
        print(json.dumps(result), flush=True)
        return result
    n_tokens = 64 if args.quick else args.tokens
    reps = args.reps or (2 if args.quick else 5)
    cases = [peer_case(name, n_tokens, reps, torch.get_num_threads()) for name in PEERS]
    return harness.emit("logit_lens", cases, model=MODEL, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    sys.exit(harness.exit_code(outcome) if "cases" in outcome else 0)
