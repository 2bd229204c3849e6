"""The rows the bundle carries: every task's built-in dataset (or its first rows), which a
config naming that dataset reads there in its place."""

import json
import textwrap
from pathlib import Path

from llm_pipeline.bundle.build import MANIFEST, write_rows
from llm_pipeline.bundle.machine import pipeline_command
from llm_pipeline.config import DataConfig
from llm_pipeline.data.sources import load_source
from llm_pipeline.tasks import builtin_datasets

PROSE = (
    "The value is shared by every caller of the {thing}, and a call that fails is tried "
    "again at its end so that the other calls are not held up by it."
)


def _tree(root: Path) -> Path:
    """Two packages of documented functions, enough for every built-in dataset's rows."""
    for package, count in (("alpha", 30), ("beta", 20)):
        functions = "".join(
            f'''
            def {package}_{i}():
                """Handle case number {i} of the {package} set.

                {PROSE.format(thing=f"{package} function {i}")}
                """
            '''
            for i in range(count)
        )
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / package / "core.py").write_text(textwrap.dedent(functions))
    return root


def test_every_builtin_dataset_is_carried_and_read_back_as_its_first_rows(tmp_path: Path) -> None:
    roots = [_tree(tmp_path / "code")]
    bundle = tmp_path / "bundle"
    carried, written = write_rows(bundle, 20, roots)
    builtins = builtin_datasets()
    assert list(carried) == list(builtins)  # the preference and classification demos' too
    assert carried["builtin:preferences"] == "data/preferences"
    (bundle / "project").mkdir()
    (bundle / MANIFEST).write_text(json.dumps({"datasets": carried}))
    for name, builtin in builtins.items():
        config = bundle / "project" / "config.json"
        config.write_text(json.dumps({"data": {"dataset": name}}))
        command = pipeline_command(bundle, config, [], python="py")
        folder = command[command.index("--set") + 1].removeprefix("data.dataset=")
        assert folder == str((bundle / carried[name]).resolve())
        splits = load_source(DataConfig(dataset=folder), tmp_path / name, builtins={}).splits
        whole = builtin.build(roots)
        # 20 rows: 16 to train, 2 to each held-out split, as far as the dataset has them.
        assert {split: len(rows) for split, rows in splits.items()} == {
            split: count for split, count in written[name].items() if count
        }
        for split, rows in splits.items():
            assert rows.to_list() == whole[split][: written[name][split]]
        assert written[name]["train"] == 16


def test_by_default_every_builtin_dataset_is_carried_whole(tmp_path: Path) -> None:
    """Without --rows each split goes as built, so a demo config trains and scores there on
    the rows `make demo` builds here."""
    roots = [_tree(tmp_path / "code")]
    _, written = write_rows(tmp_path / "bundle", None, roots)
    for name, builtin in builtin_datasets().items():
        whole = builtin.build(roots)
        assert written[name] == {split: len(whole.get(split, [])) for split in written[name]}
        assert written[name]["train"] == len(whole["train"]) > 16
