"""The bundle's checks and commands on the GPU machine, and its size limit, on planted
folders and this environment's installed packages."""

import json
import sys
from pathlib import Path

import pytest

from llm_pipeline.bundle.__main__ import main
from llm_pipeline.bundle.build import MANIFEST, check_size
from llm_pipeline.bundle.machine import pipeline_command, problems
from llm_pipeline.errors import BundleError
from llm_pipeline.lockfile import installed_versions

INSTALLED = installed_versions()
MANIFEST_OF = {
    "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    "carried": {"transformers": INSTALLED["transformers"]},
    "extras": ["cuda"],
    "requirements": ["fastapi>=0.110"],
    "machine_own": ["numpy", "torch"],
    "datasets": {
        "builtin:docstrings": "data/docstrings",
        "builtin:instructions": "data/instructions",
    },
}


def test_this_environment_runs_the_bundle() -> None:
    assert problems(MANIFEST_OF, INSTALLED) == []


def test_a_machines_own_copy_seen_first_is_named() -> None:
    older = {**INSTALLED, "transformers": "5.17.0"}
    (found,) = problems(MANIFEST_OF, older)
    assert found.startswith(f"transformers: the bundle carries {INSTALLED['transformers']}, ")
    assert "Python sees 5.17.0 first" in found and "PYTHONPATH" in found


def test_what_the_bundle_leaves_to_the_machine_is_checked() -> None:
    lacking = {k: v for k, v in INSTALLED.items() if k not in ("numpy", "fastapi")}
    found = problems(MANIFEST_OF, lacking)
    assert any(p.startswith("llm-pipeline requires numpy") and "--carry NAME" in p for p in found)
    assert "llm-pipeline requires fastapi>=0.110: not installed" in " ".join(found)


def _bundle(tmp_path: Path, dataset: str) -> tuple[Path, Path]:
    bundle = tmp_path / "bundle"
    (bundle / "project" / "configs").mkdir(parents=True)
    (bundle / MANIFEST).write_text(json.dumps(MANIFEST_OF))
    config = bundle / "project" / "configs" / "gpu.json"
    config.write_text(json.dumps({"data": {"dataset": dataset}}))
    return bundle, config


def test_a_builtin_docstring_dataset_is_read_from_the_bundles_rows(tmp_path: Path) -> None:
    bundle, config = _bundle(tmp_path, "builtin:instructions")
    command = pipeline_command(bundle, config, ["--pipeline-root", "runs"], python="py")
    assert command == [
        "py", "pipeline.py", "--config", str(config), "--pipeline-root", "runs",
        "--set", f"data.dataset={(bundle / 'data' / 'instructions').resolve()}",
    ]  # fmt: skip
    bundle, config = _bundle(tmp_path / "other", "data/mine.jsonl")
    assert "--set" not in pipeline_command(bundle, config, [], python="py")


def test_a_config_the_bundle_lacks_is_skipped_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, _ = _bundle(tmp_path, "builtin:docstrings")
    assert main(["pipeline", str(bundle), "configs/local_gpu.json"]) == 0
    assert capsys.readouterr().out == (
        "skipped: configs/local_gpu.json is not in this bundle (build it from a checkout that "
        "has it)\n"
    )


def test_a_bundle_named_by_a_relative_path_runs_its_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    bundle, _ = _bundle(tmp_path, "builtin:docstrings")
    # A pipeline.py that shows the config it was given and that it can read it.
    (bundle / "project" / "pipeline.py").write_text(
        "import sys; from pathlib import Path; i = sys.argv.index('--config'); "
        "print('read', Path(sys.argv[i + 1]).read_text())"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["pipeline", "bundle", "configs/gpu.json"]) == 0
    assert '"builtin:docstrings"' in capfd.readouterr().out


def test_a_folder_that_is_no_bundle_is_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err == f"error: {tmp_path} is not a bundle: manifest.json is missing\n"
    )


def test_a_bundle_over_the_limit_is_refused_with_its_largest_parts(tmp_path: Path) -> None:
    (tmp_path / "whl").mkdir()
    (tmp_path / "whl" / "big-1.0-py3-none-any.whl").write_bytes(b"x" * 2 * 2**20)
    (tmp_path / "whl" / "small-1.0-py3-none-any.whl").write_bytes(b"x" * 2**19)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.jsonl.gz").write_bytes(b"x" * 2**20)
    parts = check_size(tmp_path, max_mib=4)
    assert [str(p) for p in parts] == [
        "whl/big-1.0-py3-none-any.whl 2.0 MiB",
        "data/ 1.0 MiB",
        "whl/small-1.0-py3-none-any.whl 0.5 MiB",
    ]
    with pytest.raises(BundleError) as refused:
        check_size(tmp_path, max_mib=3)
    assert str(refused.value).startswith(
        "the bundle would be 3.5 MiB, over the 3 MiB limit; its largest parts: "
        "whl/big-1.0-py3-none-any.whl 2.0 MiB; data/ 1.0 MiB; "
    )
    assert "--machine-has NAME" in str(refused.value)


def test_building_into_an_existing_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", str(tmp_path)]) == 1
    assert "exists already; give a new folder" in capsys.readouterr().err


def test_running_a_config_of_a_folder_that_is_no_bundle_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said `skipped: ... is not in this bundle` and exited 0, for a mistyped folder too."""
    missing = tmp_path / "gpu-bundel"
    assert main(["pipeline", str(missing), "configs/local_gpu.json"]) == 1
    out, err = capsys.readouterr()
    assert err == f"error: {missing} is not a bundle: manifest.json is missing\n" and out == ""


@pytest.mark.parametrize(
    ("flag", "value", "problem"),
    [
        # --rows -5 built a bundle of every row but the last few, silently.
        *[("--rows", rows, "give at least 10 rows") for rows in ("-5", "0", "9")],
        # --python 3 said the lock lacks Python 3.10's backports and to run `make lock`.
        *[
            ("--python", python, "give the GPU machine's Python as major.minor")
            for python in ("3", "3.10", "python3.12", "3.12.3")
        ],
    ],
)
def test_a_bad_build_option_is_refused_by_name_before_anything_is_built(
    flag: str, value: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    assert main(["build", str(out), flag, value]) == 1
    err = capsys.readouterr().err
    assert f"error: {flag} {value}: {problem}" in err
    assert list(tmp_path.iterdir()) == []


def test_a_killed_builds_staging_folder_goes_with_the_next_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build SIGKILLed left `.<out>-*` beside OUT, up to the bundle's size, for good. The
    next build into that folder removes it; a running build's and another bundle's stay."""
    import os
    import subprocess

    from llm_pipeline.bundle import build

    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    killed = tmp_path / f".gpu-bundle-{dead.pid}-abcd1234"
    running = tmp_path / f".gpu-bundle-{os.getpid()}-efgh5678"
    other = tmp_path / f".gpu-bundle-2-{dead.pid}-ijkl9012"  # OUT gpu-bundle-2's
    for folder in (killed, running, other):
        (folder / "whl").mkdir(parents=True)

    def stop(*args: object) -> dict[str, object]:
        raise BundleError("stopped here: the test needs no bundle")

    monkeypatch.setattr(build, "_assemble", stop)
    repo = Path(__file__).resolve().parents[2]
    with pytest.raises(BundleError, match="stopped here"):
        build.build(tmp_path / "gpu-bundle", build.BuildOptions(checkout=repo))

    assert not killed.exists()
    assert running.is_dir() and other.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, other.name])
