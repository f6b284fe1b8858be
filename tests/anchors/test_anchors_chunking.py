"""Chunking: exact reproduction of the published chunks, offsets, and the rule's edges."""

from __future__ import annotations

import itertools
import random

import pytest
from anchors_helpers import folder_id, load_json, reference_folders

from mechscope.anchors.traces.chunking import first_chunk_text, reasoning_region, split_into_chunks


def published_rule(text: str) -> list[str]:
    """An independent plain-loop transcription of the published chunker (texts only)."""
    if "<think>" in text:
        text = text.split("<think>")[1].strip()
    if "</think>" in text:
        text = text.split("</think>")[0].strip()
    chunks, current = [], ""
    for i, ch in enumerate(text):
        current += ch
        para = text[i : i + 2] == "\n\n" or text[i : i + 4] == "\r\n\r\n"
        sent = i < len(text) - 1 and ch in ".?!" and text[i + 1] in " \n"
        if (para or sent) and current.strip():
            chunks.append(current.strip())
            current = ""
    if current.strip():
        chunks.append(current.strip())
    i = 0
    while i < len(chunks):
        if len(chunks[i]) >= 10:
            i += 1
        elif i == len(chunks) - 1:
            if i > 0:
                chunks[i - 1] += " " + chunks.pop(i)
            break
        else:
            chunks[i : i + 2] = [chunks[i] + " " + chunks[i + 1]]
    return chunks


@pytest.mark.parametrize("folder", reference_folders(), ids=folder_id)
def test_reproduces_published_chunks(reference_dir, folder):
    full_cot = load_json(folder / "base_solution.json")["full_cot"]
    published = [c["chunk"] for c in load_json(folder / "chunks_labeled.json")]
    chunks = split_into_chunks(full_cot)
    assert [c.text for c in chunks] == published
    assert [c.index for c in chunks] == list(range(len(published)))
    for c in chunks:  # offsets point at the same words in the original text
        assert " ".join(full_cot[c.start : c.end].split()) == " ".join(c.text.split())
        assert full_cot[c.start : c.end] == full_cot[c.start : c.end].strip()
    assert all(a.end <= b.start for a, b in itertools.pairwise(chunks))


def test_golden_folders_are_all_there(reference_dir):
    assert len(reference_folders()) == 40


def test_matches_plain_loop_on_random_texts():
    rng = random.Random(7)
    atoms = ["a", "b", "x1", ".", "?", "!", " ", "\n", "\n\n", "\r\n\r\n", "\t", "Wait", ". "]
    atoms += ["<think>", "</think>", "3.14", "Hello world"]
    for _ in range(3000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 40)))
        chunks = split_into_chunks(text)
        assert [c.text for c in chunks] == published_rule(text), repr(text)
        for c in chunks:
            assert " ".join(text[c.start : c.end].split()) == " ".join(c.text.split())


def test_boundaries_and_merging():
    text = "Ok. So x = 2.\n\nThen y = 3! Is it 3.5? Yes."
    chunks = split_into_chunks(text)
    # "Ok." (3 chars) merges forward; "3.5" is no boundary; "Yes." merges backward
    assert [c.text for c in chunks] == ["Ok. So x = 2.", "Then y = 3!", "Is it 3.5? Yes."]
    # the short last chunk went into the previous one; offsets span the original text
    assert text[chunks[-1].start : chunks[-1].end] == "Is it 3.5? Yes."
    assert text[chunks[0].start : chunks[0].end] == "Ok. So x = 2."


def test_merge_across_blank_line_keeps_offsets():
    text = "Hmm.\n\nLet me think about it."
    (chunk,) = split_into_chunks(text)
    assert chunk.text == "Hmm. Let me think about it."  # joined with one space
    assert text[chunk.start : chunk.end] == text  # the span keeps the blank line


def test_think_region():
    text = "Prompt. <think>\nStep one here. Step two here.</think> Answer is 5."
    start, end = reasoning_region(text)
    assert text[start:end] == "\nStep one here. Step two here."
    assert [c.text for c in split_into_chunks(text)] == ["Step one here.", "Step two here."]
    assert reasoning_region("no tags at all") == (0, 14)
    # a continuation without <think> is cut at its </think>
    assert first_chunk_text("Done here.\n</think>\n\n**Answer** 5") == "Done here."
    assert first_chunk_text("") == ""
    assert first_chunk_text("</think> after") == ""


def test_trailing_text_and_single_short_chunk():
    assert [c.text for c in split_into_chunks("One sentence here. and a tail")] == [
        "One sentence here.",
        "and a tail",
    ]
    assert [c.text for c in split_into_chunks("Hi.")] == ["Hi."]
    assert split_into_chunks("<think>   </think>") == []


def test_token_ranges_with_a_real_tokenizer(stories_path):
    from transformers import AutoTokenizer

    from mechscope.anchors.traces.chunking import chunk_token_ranges

    tokenizer = AutoTokenizer.from_pretrained(stories_path)
    text = (
        "Tell me. <think>\nOnce upon a time there was a cat. The cat was happy.\n\nThe end.</think>"
    )
    chunks = split_into_chunks(text)
    enc = tokenizer(text, return_offsets_mapping=True)
    ranges = chunk_token_ranges(chunks, enc["offset_mapping"])
    # "The end." is short and merges back across the blank line
    assert [c.text for c in chunks] == [
        "Once upon a time there was a cat.",
        "The cat was happy. The end.",
    ]
    assert all(a < b for a, b in ranges)
    assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(ranges))
    for chunk, (a, b) in zip(chunks, ranges, strict=True):
        decoded = tokenizer.decode(enc["input_ids"][a:b])
        assert " ".join(decoded.split()) == chunk.text
