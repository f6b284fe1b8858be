"""The multimodal path on CUDA (``make test-gpu``): an audio span patched at layer 0 on the
GPU gives the source's logits, in fp32 (as on the CPU) and in bf16.

Skips without a CUDA device. Inputs are seeded noise clips of equal length (no espeak-ng
needed). References: the CPU fp32 run of the same pair, and HF's own forward on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from modal_helpers import hf_forward, noise_wav, processed

from mechscope.data.modal_prompt import render_prompt
from mechscope.models import load_model
from mechscope.patching.run import patch_pair
from tolerance import assert_rounding_close, depth_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device (these run with make test-gpu on a machine with one)",
    ),
]

# fp32 on two devices: the same products summed in another order (TF32 off); bf16 against
# HF's bf16 forward: both round activations to 8 bits, the engine's readout is fp32 and
# HF's head bf16. Either way, rounding at the logits' scale and the pass's depth in the
# forward's dtype (tests/tolerance.py).


def _pair(tmp_path):
    from test_modal_patching import _pair as make_pair

    a = noise_wav(tmp_path / "a.wav", 1.0, seed=1)
    b = noise_wav(tmp_path / "b.wav", 1.0, seed=2)
    return make_pair(tmp_path, "audio", a, b), b


def _spec():
    from test_modal_patching import _spec as make_spec

    return make_spec("audio", layers=(0,))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_audio_span_patch_on_cuda(tmp_path, dtype):
    pair, b = _pair(tmp_path)
    gpu = load_model("tiny:qwen2_audio", device="cuda", dtype=dtype)
    got = patch_pair(gpu, pair, _spec(), keep_logits=True)[0]
    patched = np.asarray(got.logits[0, 0, 0], dtype=np.float64)  # layer 0, the span
    import soundfile

    text = render_prompt(
        "{audio} The emotion of the speaker is", gpu.processor, "audio", sample="t"
    )
    inputs = processed(gpu, text, soundfile.read(str(b), dtype="float32")[0], "audio")
    inputs = {
        k: v.to("cuda", dtype=gpu.model.dtype if v.is_floating_point() else v.dtype)
        for k, v in inputs.items()
    }
    ref = hf_forward(gpu, inputs).logits[0, -1].float().cpu().numpy()
    if dtype == "float32":
        cpu = load_model("tiny:qwen2_audio")
        want = patch_pair(cpu, pair, _spec(), keep_logits=True)[0]
        depth = depth_of(gpu)
        assert_rounding_close(patched, want.logits[0, 0, 0], depth=depth, msg="GPU vs CPU")
        assert_rounding_close(patched, ref, depth=depth, msg="GPU vs HF")
    else:
        assert np.isfinite(patched).all()
        assert_rounding_close(patched, ref, depth=depth_of(gpu), dtype=torch.bfloat16)
