"""Students: layer subsets copy the right weights, narrow students are rectangular, and a
student with another tokenizer is refused."""

from __future__ import annotations

import pytest
import torch

from mechscope.distill.config import StudentSpec
from mechscope.distill.students import (
    build_student,
    check_student_tokenizer,
    keep_every,
    layer_subset_student,
    narrow_student,
)
from mechscope.errors import InputError
from tolerance import assert_rounding_close, depth_of


def test_keep_every_spans_first_to_last():
    assert keep_every(30, 5) == [0, 6, 12, 17, 23, 29]
    assert keep_every(3, 2) == [0, 2]
    assert keep_every(4, 1) == [0, 1, 2, 3]


def test_subset_of_all_layers_reproduces_teacher(teacher):
    copy = layer_subset_student(teacher, list(range(teacher.n_layers)))
    ids = torch.tensor([[1, 5, 9, 40, 7]])
    with torch.no_grad():
        got, want = copy.model(ids).logits, teacher.model(ids).logits
    assert_rounding_close(got, want, depth=depth_of(teacher), msg="every layer kept")


def test_subset_copies_chosen_layers(teacher):
    student = layer_subset_student(teacher, [0, 2])
    assert student.n_layers == 2 and student.d_model == teacher.d_model
    t_state, s_state = teacher.model.state_dict(), student.model.state_dict()
    prefix = teacher.card.layers
    for key, value in s_state.items():
        if key.startswith(prefix + ".1."):
            src = key.replace(prefix + ".1.", prefix + ".2.")
            assert torch.equal(value, t_state[src])
        elif not key.startswith(prefix):
            assert torch.equal(value, t_state[key])


def test_narrow_student_shapes_and_seed(teacher):
    a = narrow_student(teacher, hidden=32, n_layers=2, n_heads=2, n_kv_heads=1, seed=3)
    b = narrow_student(teacher, hidden=32, n_layers=2, n_heads=2, n_kv_heads=1, seed=3)
    assert (a.d_model, a.n_layers, a.vocab_size) == (32, 2, teacher.vocab_size)
    for (_, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(InputError, match="divisible"):
        narrow_student(teacher, hidden=30, n_layers=1, n_heads=4)


def test_freeze_embeddings_default(teacher):
    s = build_student(StudentSpec(name="s", kind="layer_subset", every=2), teacher, seed=0)
    assert not s.embed_module().weight.requires_grad
    n = build_student(
        StudentSpec(name="n", kind="narrow", hidden=32, n_layers=1, n_heads=2), teacher, seed=0
    )
    assert n.embed_module().weight.requires_grad


def test_student_with_other_tokenizer_is_refused(tmp_path, teacher):
    from mechscope.models.tiny import tiny_tokenizer

    other = tiny_tokenizer(vocab_size=300)
    other.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    spec = StudentSpec(name="alien", kind="pretrained", model=str(tmp_path))
    with pytest.raises(InputError, match="tokenizer to match") as err:
        check_student_tokenizer(spec, teacher.tokenizer)
    assert "\n" not in str(err.value)
    check_student_tokenizer(
        StudentSpec(name="same", kind="pretrained", model="tiny:llama"), teacher.tokenizer
    )
