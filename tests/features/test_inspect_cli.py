"""``mechscope features inspect DIR``: what the folder holds, or one line saying why not."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mechscope.cli.main import app
from refusals import assert_refused

FIXTURES = Path(__file__).parent / "fixtures"


def test_inspect_prints_what_it_found() -> None:
    folder = FIXTURES / "saelens" / "jumprelu_skip_transcoder"
    result = CliRunner().invoke(app, ["features", "inspect", str(folder)])
    assert result.exit_code == 0, result.output
    for text in ("saelens", "skip_transcoder", "jumprelu", "mlp_in, layer 0", "tiny-llama"):
        assert text in result.output


def test_inspect_refuses_a_folder_of_no_layout(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "notes.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    assert_refused(
        ["features", "inspect", str(tmp_path)], "the files of one layout", tmp_path, capsys
    )
