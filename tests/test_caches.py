"""One cache folder for all the project keeps: chosen by one variable (or its older name),
then XDG, then the home folder; torch.compile's kernels kept in it, for this user alone."""

import os
import stat
from pathlib import Path

import pytest

from llm_pipeline import caches


@pytest.fixture
def no_cache_vars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """HOME in `tmp_path/home`, with none of the variables that would choose otherwise."""
    for name in (caches.ENV_VAR, caches.OLD_ENV_VAR, "XDG_CACHE_HOME", caches.INDUCTOR_ENV_VAR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home" / ".cache" / "llm-pipeline"


def test_the_variable_then_its_older_name_then_xdg_then_home(
    no_cache_vars: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert caches.cache_folder("models") == no_cache_vars / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # the XDG spec ignores a relative one
    assert caches.cache_folder("models") == no_cache_vars / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert caches.cache_folder("models") == tmp_path / "xdg" / "llm-pipeline" / "models"
    monkeypatch.setenv(caches.OLD_ENV_VAR, str(tmp_path / "old"))
    assert caches.cache_folder("models") == tmp_path / "old" / "models"
    monkeypatch.setenv(caches.ENV_VAR, str(tmp_path / "new"))
    assert caches.cache_folder("models") == tmp_path / "new" / "models"


def test_every_cache_of_the_project_is_under_the_one_folder(
    no_cache_vars: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from llm_pipeline.bundle.build import BuildOptions
    from llm_pipeline.data.docstring_cache import cache_folder
    from llm_pipeline.models.sources import default_cache_dir

    monkeypatch.setenv(caches.ENV_VAR, str(tmp_path / "mine"))
    assert cache_folder() == tmp_path / "mine" / "docstrings"
    assert default_cache_dir() == tmp_path / "mine" / "models"
    options = BuildOptions(checkout=tmp_path)
    assert options.wheel_cache == tmp_path / "mine" / "bundle-wheels"


def test_compiled_kernels_go_to_this_users_cache_unless_torch_is_told_where(
    no_cache_vars: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Not torch's /tmp/torchinductor_<user>, which it trusts whoever made it, and which a
    local run's private TMPDIR removed with the run."""
    folder = caches.keep_compiled_kernels()

    assert folder == no_cache_vars / "inductor" and folder.is_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert os.environ[caches.INDUCTOR_ENV_VAR] == str(folder)

    monkeypatch.setenv(caches.INDUCTOR_ENV_VAR, str(tmp_path / "chosen"))
    assert caches.keep_compiled_kernels() == tmp_path / "chosen"
    assert os.environ[caches.INDUCTOR_ENV_VAR] == str(tmp_path / "chosen")
