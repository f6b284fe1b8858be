"""Generation in the engine against transformers' own ``generate`` and one-pass references.

Greedy rollouts must equal ``model.generate`` token for token (every causal family's tiny
model, the real stories260K), with refills (fewer slots than rollouts) and prompts of
different lengths sharing a batch. Sampled rollouts must not depend on their batch.
Interventions during generation are checked against weights edited by hand (a gate) and a
teacher-forced full pass with the same intervention (suppression).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from mechscope.engine import Engine, Gate, Read, Site, SuppressAttention
from mechscope.engine.generation.generate import Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.engine.interventions.prefix import can_resume
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models import all_cards, load_model
from tolerance import assert_rounding_close, depth_of

CAUSAL = sorted(f for f, card in all_cards().items() if card.causal)
#: Derived-card families the built-in ones do not cover: mixture of experts, post-norm,
#: MLA, attention sinks, soft-capping (the last two with sliding windows), attention chunks
#: (Llama 4), GPT-Neo's local layers, ALiBi (Bloom, MPT, Falcon-RW), attention in the
#: family's own code (XGLM), cross-attention layers (Mllama): tiny configs make every
#: window and chunk 8 tokens long.
DERIVED = [
    "mixtral", "qwen3_moe", "olmo2", "deepseek_v3", "gpt_oss", "gemma2", "llama4_text",
    "gpt_neo", "bloom", "mpt", "falcon", "xglm", "mllama",
]  # fmt: skip
SAMPLED = Sampling(max_new_tokens=24, temperature=0.6, top_p=0.95)


@pytest.fixture(scope="module")
def stories(stories_path):
    lm = load_model(str(stories_path))
    return Engine.of(lm)


def _ids(lm, n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(10, min(lm.vocab_size, 300), (n,), generator=gen).tolist()


def _hf_greedy(model: torch.nn.Module, ids: list[int], n: int, eos: set[int]) -> list[int]:
    """transformers' greedy continuation, cut before the first end-of-sequence token."""
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0)[
        0, len(ids) :
    ].tolist()
    cut = [i for i, t in enumerate(out) if t in eos]
    return out[: cut[0]] if cut else out


def _eos(lm) -> set[int]:
    eos = lm.model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids | ({lm.tokenizer.eos_token_id} - {None})


def test_greedy_equals_hf_generate_with_refills(stories):
    lm = stories.lm
    prompts = [
        Prompt(_ids(lm, 5, 0), seeds=[0, 1], max_new_tokens=12),
        Prompt(_ids(lm, 9, 1), seeds=[0, 1, 2], max_new_tokens=7),
        Prompt(_ids(lm, 17, 2), seeds=[0], max_new_tokens=20),
    ]
    out = stories.generate(prompts, Sampling(max_new_tokens=99), slots=2)
    for p, rollouts in zip(prompts, out, strict=True):
        ref = _hf_greedy(lm.model, list(p.ids), p.max_new_tokens, _eos(lm))
        assert len(rollouts) == len(p.seeds)
        for r in rollouts:
            assert list(r.tokens) == ref
            assert r.stop == ("length" if len(ref) == p.max_new_tokens else "eos")


def assert_logits_match_hf(engine, prompts: list[Prompt], slots: int, **kwargs) -> None:
    """Every greedy rollout's logits, step by step, equal those transformers' ``generate``
    chose the same tokens from (within rounding at the logits' scale, through every layer
    and the head), and so do the tokens up
    to a near-tie (where the texts part, the rest is not compared). Logits, not only
    tokens: a tiny random model often repeats one token whatever its context."""
    lm = engine.lm
    seen: dict[tuple[int, int], list[torch.Tensor]] = {}
    out = engine.generate(
        prompts, Sampling(max_new_tokens=99), slots=slots,
        on_logits=lambda i, k, x: seen.setdefault((i, k), []).append(x.float().clone()),
        **kwargs,
    )  # fmt: skip
    for i, (p, rollouts) in enumerate(zip(prompts, out, strict=True)):
        ref = lm.model.generate(
            torch.tensor([list(p.ids)]), max_new_tokens=p.max_new_tokens, do_sample=False,
            pad_token_id=0, return_dict_in_generate=True, output_logits=True,
        )  # fmt: skip
        ref_tokens = ref.sequences[0, len(p.ids) :].tolist()
        for k, rollout in enumerate(rollouts):
            got = seen[(i, k)]
            for t, ref_logits in enumerate(ref.logits):
                what = f"prompt {i} rollout {k} new token {t + 1}"
                assert_rounding_close(got[t], ref_logits[0], depth=depth_of(lm), msg=what)
                if t < len(rollout.tokens) and rollout.tokens[t] != ref_tokens[t]:
                    break  # a near-tie within the tolerance
            else:
                assert len(got) == len(ref.logits)


@pytest.mark.parametrize("family", CAUSAL + DERIVED)
def test_greedy_equals_hf_generate_every_family(family):
    """Within the attention span (slots, with a refill) and past it (lock step wherever a
    window or chunk of 8 is crossed)."""
    lm = load_model(f"tiny:{family}")
    engine = Engine.of(lm)
    short = [Prompt(_ids(lm, 4, 3), seeds=[0, 1], max_new_tokens=2), Prompt(_ids(lm, 3, 4), [0], 4)]
    long = [Prompt(_ids(lm, 6, 3), [0, 1], max_new_tokens=10), Prompt(_ids(lm, 11, 4), [0], 10)]
    for prompts in (short, long):
        assert_logits_match_hf(engine, prompts, slots=2)


def test_sliding_window_model_decodes_in_lock_step_exactly():
    """tiny gemma3_text keeps an 8-token window: rows of different lengths cannot share a
    slot cache, so each prompt's rollouts run on transformers' cache, still exact."""
    lm = load_model("tiny:gemma3_text")
    ids = _ids(lm, 12, 5)
    assert not can_resume(lm, len(ids) + 10)
    out = Engine.of(lm).generate([Prompt(ids, seeds=[0, 1, 2])], Sampling(10), slots=2)
    ref = _hf_greedy(lm.model, ids, 10, _eos(lm))
    assert [list(r.tokens) for r in out[0]] == [ref] * 3


def test_a_rollout_is_the_same_alone_and_in_any_batch(stories):
    lm = stories.lm
    prompts = [Prompt(_ids(lm, 7, 6), seeds=list(range(6))), Prompt(_ids(lm, 13, 7), [6, 7])]
    runs = [stories.generate(prompts, SAMPLED, slots=s) for s in (1, 3, 16)]
    assert runs[0] == runs[1] == runs[2]
    alone = stories.generate([Prompt(prompts[0].ids, seeds=[4])], SAMPLED, slots=1)[0][0]
    assert alone == runs[1][0][4]
    # seeds matter: the six rollouts of one prompt are not all the same
    assert len({r.tokens for r in runs[0][0]}) > 1


def test_a_computed_prefix_gives_the_same_rollouts(stories):
    lm = stories.lm
    ids = _ids(lm, 15, 8)
    prefix = stories.run(torch.tensor([ids[:9]]), logits=False, cache=True).cache
    plain = stories.generate([Prompt(ids, seeds=[1, 2])], SAMPLED)
    cached = stories.generate([Prompt(ids, seeds=[1, 2], prefix=prefix)], SAMPLED)
    assert plain == cached


def test_stop_strings_cut_the_text(stories):
    lm = stories.lm
    ids = lm.tokenizer("Once upon a time")["input_ids"]
    full = stories.generate([Prompt(ids, [0])], Sampling(max_new_tokens=30))[0][0]
    stop = full.text[5:8]
    cut = stories.generate([Prompt(ids, [0])], Sampling(30, stop_strings=(stop,)))[0][0]
    assert cut.stop == "stop_string"
    assert cut.text == full.text[: full.text.index(stop)]
    assert len(cut.tokens) < len(full.tokens)


def test_a_gate_during_generation_equals_zeroed_output_columns(stories):
    lm = stories.lm
    layer, head = 2, 1
    alpha = torch.ones(lm.n_layers, lm.n_heads)
    alpha[layer, head] = 0.0
    ids = _ids(lm, 8, 9)
    got = stories.generate([Prompt(ids, [0])], Sampling(16), interventions=[Gate(alpha)])
    edited = copy.deepcopy(lm.model)
    o_proj = edited.model.layers[layer].self_attn.o_proj
    with torch.no_grad():
        o_proj.weight[:, head * lm.d_head : (head + 1) * lm.d_head] = 0
    ref = _hf_greedy(edited, ids, 16, _eos(lm))
    plain = _hf_greedy(lm.model, ids, 16, _eos(lm))
    assert list(got[0][0].tokens) == ref
    assert ref != plain  # the gate changes the continuation (the check is not vacuous)


def test_suppression_during_generation_equals_a_teacher_forced_pass(stories):
    """Greedy tokens under a suppressed key span = the argmax of one full pass over the
    finished text with the same suppression (no cache, explicit attention)."""
    lm = stories.lm
    ids = _ids(lm, 10, 10)
    suppress = SuppressAttention((2, 6))
    got = stories.generate([Prompt(ids, [0, 1])], Sampling(14), slots=1, interventions=[suppress])
    tokens = list(got[0][0].tokens)
    full = torch.tensor([ids + tokens])
    logits = stories.run(full, [suppress]).logits[0]  # [seq, vocab]
    assert logits[len(ids) - 1 : -1].argmax(-1).tolist() == tokens
    plain = stories.generate([Prompt(ids, [0])], Sampling(14))[0][0]
    assert plain.tokens != got[0][0].tokens


def test_generation_refuses_reads_per_row_work_and_non_causal_models(stories):
    prompt = [Prompt([5, 6, 7], [0])]
    with pytest.raises(UnsupportedInterventionError, match="Read during generation"):
        stories.generate(prompt, Sampling(4), interventions=[Read(Site("resid_post", 0))])
    per_row = Gate(torch.ones(2, stories.lm.n_layers, stories.lm.n_heads))
    with pytest.raises(UnsupportedInterventionError, match="per-row Gate"):
        stories.generate(prompt, Sampling(4), interventions=[per_row])
    llada = Engine.of(load_model("tiny:llada"))
    with pytest.raises(UnsupportedInterventionError, match="causal"):
        llada.generate(prompt, Sampling(4))


def test_bad_sampling_settings_are_input_errors():
    with pytest.raises(InputError, match="max_new_tokens"):
        Sampling(max_new_tokens=0)
    with pytest.raises(InputError, match="top_p"):
        Sampling(4, temperature=0.6, top_p=0.0)
    with pytest.raises(InputError, match="temperature"):
        Sampling(4, temperature=-1.0)


def test_no_deprecation_warning_from_transformers(stories, monkeypatch):
    """transformers logs (once per process) when a cache is passed or read under its old
    name ``past_key_values``; generation, prefix resume and the lens study's passes must
    never do that. The logger is replaced, so an earlier test's warning cannot hide one."""
    from transformers.utils import generic

    said: list[str] = []
    monkeypatch.setattr(generic.logger, "warning_once", lambda msg, *a, **k: said.append(msg))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stories.generate([Prompt([5, 6, 7], [0, 1])], SAMPLED)
        prefix = stories.run(torch.tensor([[5, 6, 7, 8]]), logits=False, cache=True).cache
        stories.generate([Prompt([5, 6, 7, 8, 9], [0], prefix=prefix)], SAMPLED)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
    assert not said


def test_nucleus_draws_follow_the_truncated_distribution():
    """Independent check of the sampler: draw frequencies match the nucleus distribution
    computed by hand (chi-square test, p > 1e-3 on 20k draws) and never leave it."""
    from scipy.stats import chisquare

    from mechscope.engine.generation.sampling import next_tokens

    logits = torch.log(torch.tensor([[0.05, 0.4, 0.1, 0.3, 0.15]]))
    sampling = Sampling(1, temperature=1.0, top_p=0.8)
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([next_tokens(logits, sampling, [gen]) for _ in range(20_000)])
    counts = torch.bincount(draws, minlength=5)
    assert counts[0] == 0 and counts[2] == 0  # outside the nucleus {1, 3, 4} (0.85 >= 0.8)
    expected = torch.tensor([0.4, 0.3, 0.15]) / 0.85 * 20_000
    assert chisquare(counts[[1, 3, 4]].numpy(), expected.numpy()).pvalue > 1e-3
