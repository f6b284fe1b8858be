"""Span patching of audio and image spans against HF's own forward."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch
from modal_helpers import hf_forward, noise_wav, processed
from PIL import Image

from mechscope.data.modal_prompt import pad_media, render_prompt
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.patching.config import PatchSpec
from mechscope.patching.exact import pool_positions
from mechscope.patching.modal import prepare_modal_pair
from mechscope.patching.run import patch_pair
from mechscope.patching.samples import load_pairs_jsonl
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of

PROMPT = "{%s} The emotion of the speaker is"
WORDS = [" neutral", " happy", " sad", " angry", " surprised"]


def _pair(tmp_path, kind, base, source, pid="p"):
    rec = {
        "id": pid,
        "base": {"prompt": PROMPT % kind, kind: str(base)},
        "source": {"prompt": PROMPT % kind, kind: str(source)},
        "target": " happy",
        "wrong": " sad",
        "candidates": WORDS,
    }
    path = tmp_path / f"{pid}.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    return load_pairs_jsonl(path)[0]


def _spec(kind, **kw):
    base = {
        "granularity": "span",
        "spans": (kind,),
        "policy": "first",
        "skip_identical": False,  # every variant runs a forward: nothing is copied
    }
    return PatchSpec(**{**base, **kw})


def test_whole_audio_span_at_layer_0_gives_the_source_logits(audio_lm, speech_dir, tmp_path):
    a, b = speech_dir / "audio" / "happy-sad.wav", speech_dir / "audio" / "sad-happy.wav"
    pair = _pair(tmp_path, "audio", a, b)
    spec = _spec("audio", span_policy="pad", directions=("denoising", "noising"))
    res, back = patch_pair(audio_lm, pair, spec, keep_logits=True)
    # independent: B padded with silence to A's duration, through HF's own forward
    clip_a, clip_b = (soundfile.read(str(p), dtype="float32")[0] for p in (a, b))
    text = render_prompt(PROMPT % "audio", audio_lm.processor, "audio", sample="t")
    ref_b = hf_forward(
        audio_lm, processed(audio_lm, text, pad_media(clip_b, "audio", clip_a), "audio")
    )
    ref_a = hf_forward(
        audio_lm, processed(audio_lm, text, pad_media(clip_a, "audio", clip_b), "audio")
    )
    a_logits, b_logits = ref_a.logits[0, -1], ref_b.logits[0, -1]
    depth, top = depth_of(audio_lm), scale_of(a_logits, b_logits)
    assert_beyond_rounding(a_logits, b_logits, depth=depth, scale=top, msg="A vs B")  # can fail
    assert_rounding_close(res.logits[0, 0, 0], b_logits, depth=depth, msg="denoised")
    # and the unpatched base is A
    base_logit = res.baseline["base_target_logit"]
    want = float(a_logits[pair_target(audio_lm, text)])
    assert_rounding_close(base_logit, want, depth=depth, scale=top, msg="base")
    # noising patches A's span into B: A's logits
    assert_rounding_close(back.logits[0, 0, 0], a_logits, depth=depth, msg="noised")
    assert res.logits.shape[0] == audio_lm.n_layers


def pair_target(lm, text):
    n = len(lm.tokenizer(text).input_ids)
    return lm.tokenizer(text + " happy").input_ids[n]


def test_patching_a_clip_into_itself_changes_nothing(audio_lm, speech_dir, tmp_path):
    a = speech_dir / "audio" / "angry-neutral.wav"
    pair = _pair(tmp_path, "audio", a, a)
    res = patch_pair(audio_lm, pair, _spec("audio"), keep_logits=True)[0]
    assert res.baseline["forward_rows"] == audio_lm.n_layers  # the forwards did run
    depth, top = depth_of(audio_lm), scale_of(res.logits)  # a difference of two logits
    assert_rounding_close(res.metrics["delta_logit"], 0.0, depth=depth, scale=2 * top)
    assert res.metrics["flip_from_base"].sum() == 0
    text = render_prompt(PROMPT % "audio", audio_lm.processor, "audio", sample="t")
    ref = hf_forward(
        audio_lm, processed(audio_lm, text, soundfile.read(str(a), dtype="float32")[0], "audio")
    )
    for layer in range(audio_lm.n_layers):
        want = ref.logits[0, -1]
        assert_rounding_close(res.logits[layer, 0, 0], want, depth=depth, msg=f"{layer}")


@pytest.mark.parametrize("model", ["llava", "gemma3"])
def test_whole_image_span_at_layer_0_gives_the_source_logits(
    model, image_lm, gemma3_lm, image_files, tmp_path
):
    image_lm = image_lm if model == "llava" else gemma3_lm
    pair = _pair(tmp_path, "image", *image_files)
    res = patch_pair(image_lm, pair, _spec("image", layers=(0,)), keep_logits=True)[0]
    text = render_prompt(PROMPT % "image", image_lm.processor, "image", sample="t")
    base, source = (Image.open(p).convert("RGB") for p in image_files)
    ref = hf_forward(image_lm, processed(image_lm, text, source, "image")).logits[0, -1]
    ref_a = hf_forward(image_lm, processed(image_lm, text, base, "image")).logits[0, -1]
    depth = depth_of(image_lm)  # the images give different logits
    assert_beyond_rounding(ref, ref_a, depth=depth, scale=scale_of(ref, ref_a), msg="images")
    assert_rounding_close(res.logits[0, 0, 0], ref, depth=depth, msg="source logits")


def test_spans_of_different_lengths_need_a_policy(audio_lm, speech_dir, tmp_path):
    a, b = speech_dir / "audio" / "sad-sad.wav", speech_dir / "audio" / "angry-angry.wav"
    pair = _pair(tmp_path, "audio", a, b)
    with pytest.raises(InputError) as exc:
        prepare_modal_pair(audio_lm, pair, "denoising", _spec("audio"))
    msg = str(exc.value)
    assert "\n" not in msg and "'p'" in msg and "--span-policy" in msg
    pad = prepare_modal_pair(audio_lm, pair, "denoising", _spec("audio", span_policy="pad"))
    (bs, be), (ss, se) = pad.spans["audio"]
    assert be - bs == se - ss and len(pad.base_ids) == len(pad.source_ids)
    cut = prepare_modal_pair(audio_lm, pair, "denoising", _spec("audio", span_policy="truncate"))
    (bs, be), (ss, se) = cut.spans["audio"]
    pool = prepare_modal_pair(audio_lm, pair, "denoising", _spec("audio", span_policy="pool"))
    (pbs, pbe), (pss, pse) = pool.spans["audio"]  # pool keeps both spans whole
    assert pbe - pbs != pse - pss
    assert be - bs == se - ss == min(pbe - pbs, pse - pss) and (bs, ss) == (pbs, pss)
    for policy in ("truncate", "pool"):
        res = patch_pair(audio_lm, pair, _spec("audio", span_policy=policy, layers=(0,)))[0]
        assert np.isfinite(res.metrics["delta_logit"]).all()


def test_pool_averages_the_source_span_to_the_base_length():
    x = torch.arange(24.0).reshape(6, 2, 2)  # [m=6, heads, d]
    got = pool_positions(x, 3)
    want = torch.stack([x[0:2].mean(0), x[2:4].mean(0), x[4:6].mean(0)])
    assert torch.equal(got, want)  # whole numbers averaged in pairs: exact in binary
    assert torch.equal(pool_positions(x, 6), x)  # one position each: itself


def test_text_pairs_refuse_pad(tmp_path):
    from mechscope.data.pairs import ContrastivePair
    from mechscope.models.tiny import tiny_tokenizer
    from mechscope.patching.prepare import prepare_pair

    pair = ContrastivePair.from_dict(
        {
            "id": "t",
            "task": "x",
            "clean": "When Mary and John went",
            "corrupt": "When Mary and John went",
            "correct": " Mary",
            "wrong": " John",
            "spans": {},
            "corrupt_spans": {},
        }
    )
    with pytest.raises(InputError, match="pad"):
        prepare_pair(
            pair, tiny_tokenizer(), "denoising", PatchSpec(span_policy="pad", policy="first")
        )


def test_attribution_of_media_pairs_is_refused_in_one_line(audio_lm, speech_dir, tmp_path):
    a = noise_wav(tmp_path / "a.wav", 0.5)
    pair = _pair(tmp_path, "audio", a, a)
    with pytest.raises(UnsupportedInterventionError) as exc:
        prepare_modal_pair(audio_lm, pair, "denoising", _spec("audio", attribution=True))
    assert "\n" not in str(exc.value)


def _spliced_logits(lm, emb_a, rows):
    """The language model's logits at the last position on A's layer-0 input with ``rows``
    (position -> new row) written in: HF's own modules, not the engine."""
    emb = emb_a.clone()
    for pos, row in rows.items():
        emb[0, pos] = row
    with torch.no_grad():
        h = lm.model.model.language_model(inputs_embeds=emb).last_hidden_state
        return lm.model.lm_head(h)[0, -1].numpy()


@pytest.mark.parametrize("policy", ["truncate", "pool"])
def test_truncate_and_pool_at_layer_0_equal_a_spliced_input(audio_lm, speech_dir, tmp_path, policy):
    a, b = speech_dir / "audio" / "sad-sad.wav", speech_dir / "audio" / "angry-angry.wav"
    pair = _pair(tmp_path, "audio", a, b)
    spec = _spec("audio", span_policy=policy, layers=(0,))
    res = patch_pair(audio_lm, pair, spec, keep_logits=True)[0]
    text = render_prompt(PROMPT % "audio", audio_lm.processor, "audio", sample="t")
    inputs = [
        processed(audio_lm, text, soundfile.read(str(p), dtype="float32")[0], "audio")
        for p in (a, b)
    ]
    emb = [hf_forward(audio_lm, x).hidden_states[0] for x in inputs]  # [1, seq, d] layer-0 input
    ph = audio_lm.model.config.audio_token_index
    spans = [(x["input_ids"][0] == ph).nonzero().flatten().tolist() for x in inputs]
    assert len(spans[0]) != len(spans[1])
    if policy == "truncate":
        m = min(map(len, spans))
        rows = {spans[0][i]: emb[1][0, spans[1][i]] for i in range(m)}
    else:  # each base position: the mean of the source positions its share covers
        n, src = len(spans[0]), emb[1][0, spans[1]]  # [m, d]
        m = len(spans[1])
        rows = {spans[0][i]: src[(i * m) // n : -((-(i + 1) * m) // n)].mean(0) for i in range(n)}
    want = _spliced_logits(audio_lm, emb[0], rows)
    depth, other = depth_of(audio_lm), _spliced_logits(audio_lm, emb[0], {})
    assert_beyond_rounding(want, other, depth=depth, scale=scale_of(want, other), msg="A")
    assert_rounding_close(res.logits[0, 0, 0], want, depth=depth, msg="spliced")


def test_a_replaced_clip_changes_the_pairs_content_key(tmp_path):
    """A resumed run recomputes a pair whose clip was replaced under the same file name."""
    from mechscope.runs.content_key import content_key

    a, b = noise_wav(tmp_path / "a.wav", 0.5), noise_wav(tmp_path / "b.wav", 0.5, seed=1)
    before = content_key(_pair(tmp_path, "audio", a, b))
    assert content_key(_pair(tmp_path, "audio", a, b)) == before
    noise_wav(b, 0.5, seed=2)
    assert content_key(_pair(tmp_path, "audio", a, b)) != before
