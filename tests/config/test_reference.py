"""`pipeline.py --help-config [SECTION]`: one section at a time, as text that fits the
terminal, from the same models as the README's Markdown reference."""

import pytest

from llm_pipeline import cli
from llm_pipeline.config.reference import section_names


def help_config(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["--help-config", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_one_section_wrapped_to_the_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    code, out, _ = help_config(capsys, "train")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "train (--set train.KEY=VALUE):"
    assert max(len(line) for line in lines) <= 72
    assert "  train.epochs  (number; default 1.0)" in lines
    assert "      Passes over the training split." in lines
    assert "train.lora (--set train.lora.KEY=VALUE):" in lines  # the section nested in it
    assert not any(line.startswith(("data", "  data.", "|", "#")) for line in lines)


def test_without_a_section_the_top_level_and_the_sections(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = help_config(capsys)
    assert code == 0
    assert out.startswith("top level:\n  task  (")
    assert "  train  (a section: --help-config train)" in out
    assert "Sections: data, model, model.encoder_decoder, train, train.lora," in out
    assert len(out.splitlines()) < 60
    assert set(section_names()) >= {"data", "model", "train", "evaluate", "deploy", "vertex"}


def test_an_unknown_section_is_refused_naming_the_sections(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = help_config(capsys, "trian")
    assert code == 2 and out == ""
    assert err.startswith("error: --help-config: no config section 'trian'; sections: data,")
