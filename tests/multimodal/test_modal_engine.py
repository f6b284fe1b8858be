"""The engine on multimodal models: its sites, logits and lens against HF's own forward on
the processor's outputs (espeak-ng speech for Qwen2-Audio, real PNGs for LLaVA)."""

from __future__ import annotations

import pytest
import soundfile
import torch
from modal_helpers import hf_forward, noise_wav, processed
from PIL import Image

from mechscope.data.modal_prompt import encode_modal, render_prompt
from mechscope.engine import Engine, Patch, Read, Site
from mechscope.errors import UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of

PROMPT = "{%s} The emotion of the speaker is"


def _media(kind, speech_dir, image_files, which=0):
    if kind == "audio":
        name = ("happy-sad", "sad-happy")[which]
        return soundfile.read(str(speech_dir / "audio" / f"{name}.wav"), dtype="float32")[0]
    return Image.open(image_files[which]).convert("RGB")


@pytest.fixture(params=["audio", "image", "gemma3"])
def case(request, audio_lm, image_lm, gemma3_lm, speech_dir, image_files):
    kind = "audio" if request.param == "audio" else "image"
    lm = {"audio": audio_lm, "image": image_lm, "gemma3": gemma3_lm}[request.param]
    text = render_prompt(PROMPT % kind, lm.processor, kind, sample="t")
    return lm, kind, text, _media(kind, speech_dir, image_files)


def test_sites_and_logits_equal_hf_forward(case):
    lm, kind, text, media = case
    mp = encode_modal(lm.processor, lm.model.config, text, kind, media, sample="t")
    ref_inputs = processed(lm, text, media, kind)
    assert mp.ids == ref_inputs["input_ids"][0].tolist()
    sites = [Site("resid_post", layer) for layer in range(lm.n_layers)]
    out = Engine.of(lm).run(
        torch.tensor([mp.ids]), [Read(s) for s in sites], model_inputs=mp.inputs
    )
    ref = hf_forward(lm, ref_inputs)
    for s in sites[:-1]:  # HF's last hidden state is after the final norm
        want = ref.hidden_states[s.layer + 1]
        assert_rounding_close(out[s], want, depth=depth_of(lm, s.layer + 1), msg=str(s))
    assert_rounding_close(out.logits, ref.logits, depth=depth_of(lm), msg="logits")
    # lens at the last layer = logits
    lens = Engine.of(lm).unembed(out[sites[-1]])
    assert_rounding_close(lens, ref.logits, depth=depth_of(lm), msg="lens")


def test_span_is_where_the_media_enters(case, speech_dir, image_files):
    """Two prompts with the same text and media of the same size: their layer-0 inputs
    differ exactly at the span's positions."""
    lm, kind, text, media = case
    if kind == "audio":  # two clips of the same duration
        d = speech_dir / "same"
        d.mkdir(exist_ok=True)
        clips = [soundfile.read(str(noise_wav(d / f"{i}.wav", 1.0, seed=i)))[0] for i in (0, 1)]
    else:
        clips = [media, _media(kind, speech_dir, image_files, 1)]
    mps = [encode_modal(lm.processor, lm.model.config, text, kind, c, sample="t") for c in clips]
    assert mps[0].ids == mps[1].ids and mps[0].span == mps[1].span
    start, end = mps[0].span
    ph = lm.model.config.audio_token_index if kind == "audio" else lm.model.config.image_token_index
    assert [i for i, t in enumerate(mps[0].ids) if t == ph] == list(range(start, end))
    site = Site("resid_pre", 0)
    h = [
        Engine.of(lm).run(torch.tensor([m.ids]), [Read(site)], logits=False, model_inputs=m.inputs)[
            site
        ][0]
        for m in mps
    ]  # [seq, d_model] each
    differs = (h[0] != h[1]).any(-1).nonzero().flatten().tolist()
    assert differs == list(range(start, end))


def test_patching_nothing_changes_nothing(case):
    lm, kind, text, media = case
    mp = encode_modal(lm.processor, lm.model.config, text, kind, media, sample="t")
    ids, eng = torch.tensor([mp.ids]), Engine.of(lm)
    plain = eng.run(ids, model_inputs=mp.inputs).logits
    for layer in range(lm.n_layers):
        site = Site("resid_pre", layer)
        noise = torch.randn(1, len(mp.ids), lm.d_model)
        mask = torch.zeros(1, len(mp.ids), dtype=torch.bool)  # patch no position
        got = eng.run(ids, [Patch(site, noise, mask=mask)], model_inputs=mp.inputs).logits
        assert torch.equal(got, plain)


def test_prefix_reuse_is_refused_in_one_line(audio_lm, speech_dir):
    from mechscope.engine.interventions.prefix import Resume, can_resume

    assert not can_resume(audio_lm, 10)
    media = _media("audio", speech_dir, None)
    text = render_prompt(PROMPT % "audio", audio_lm.processor, "audio", sample="t")
    mp = encode_modal(audio_lm.processor, audio_lm.model.config, text, "audio", media, sample="t")
    eng = Engine.of(audio_lm)
    full = eng.run(torch.tensor([mp.ids]), cache=True, model_inputs=mp.inputs)
    with pytest.raises(UnsupportedInterventionError) as exc:
        eng.run(
            torch.tensor([mp.ids]),
            resume=Resume(full.cache, len(mp.ids) - 2),
            model_inputs=mp.inputs,
        )
    assert "\n" not in str(exc.value)


def test_a_saved_model_directory_loads_with_its_processor(audio_lm, speech_dir, tmp_path):
    """The path a real audio LLM takes: AutoProcessor + AutoModelForMultimodalLM."""
    audio_lm.model.save_pretrained(tmp_path)
    audio_lm.processor.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path))
    assert lm.modality == "audio" and lm.card.auto_class == "AutoModelForMultimodalLM"
    assert "resume" in lm.refused
    media = _media("audio", speech_dir, None)
    text = render_prompt(PROMPT % "audio", lm.processor, "audio", sample="t")
    mp = encode_modal(lm.processor, lm.model.config, text, "audio", media, sample="t")
    ref = hf_forward(audio_lm, processed(audio_lm, text, media, "audio")).logits
    got = Engine.of(lm).run(torch.tensor([mp.ids]), model_inputs=mp.inputs).logits
    assert_rounding_close(got, ref, depth=depth_of(lm), msg="logits")
