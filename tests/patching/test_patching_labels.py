"""Position labels say whose tokens they are; long figure titles wrap instead of being cut."""

from __future__ import annotations

from mechscope.patching.figures import label_note, unit_labels
from mechscope.patching.result import PairResult, PatchingResult
from mechscope.report.render_static import wrap_title


def pair(pair_id: str, units: list[str], roles: list[str] | None = None) -> PairResult:
    return PairResult(
        pair_id=pair_id,
        direction="denoising",
        site="resid_pre",
        granularity="position",
        layers=[0],
        units=units,
        positions=list(range(len(units))),
        heads=[-1],
        roles=roles or [],
    )


def test_tokens_shared_by_every_pair_are_plain_labels():
    res = PatchingResult(
        [pair("a", ["0:The", "1:ĠParis"]), pair("b", ["0:The", "1:ĠParis"])],
        "resid_pre",
        "position",
    )
    assert unit_labels(res, "denoising") == ["0 'The'", "1 'Paris'"]
    assert label_note(res, "denoising") == ""


def test_tokens_of_one_pair_are_marked_and_named():
    res = PatchingResult(
        [pair("a", ["0:The", "1:ĠMad"]), pair("b", ["0:The", "1:ĠRome"])], "resid_pre", "position"
    )
    assert unit_labels(res, "denoising") == ["0 'The'", "1 'Mad'*"]
    assert "pair a's tokens" in label_note(res, "denoising")


def test_roles_win_over_tokens():
    res = PatchingResult(
        [pair("a", ["0:The", "1:ĠMad"], ["", "S2"]), pair("b", ["0:The", "1:ĠRome"], ["", "S2"])],
        "resid_pre",
        "position",
    )
    assert unit_labels(res, "denoising") == ["0 'The'", "1 S2"]


def test_long_titles_wrap_to_the_figure_width():
    title = (
        "resid_pre patching (denoising): normalized effect (0 = corrupt, 1 = clean), "
        "mean of 16 pairs"
    )
    lines = wrap_title(title, 6.4).splitlines()
    assert len(lines) == 2 and " ".join(lines) == title
    assert wrap_title("short", 6.4) == "short"
