"""No module under MIN_LINES lines, unless it is a package's face (`__init__.py`,
`__main__.py`) or one of the one-module-per-step packages (components/, steps/).

A module that small is usually half an idea whose other half lives elsewhere: a newcomer
opens two files to read one thing. Merge it into the module of the same idea.
"""

from pathlib import Path

from .module_imports import SOURCE, modules

MIN_LINES = 40

#: One module per pipeline step, by design, however short.
PER_STEP = {"components", "steps"}

#: Small modules kept on purpose, each with its reason. Each must still exist and still be
#: small, so that the list cannot outlive its entries.
KEPT = {
    # The class every config section derives from; every section module imports it, and
    # the formatter it reports with (config/errors.py) must not import it back.
    "config/base.py": "the base class of every config section, imported by each of them",
    # Status lines and durations: a step prints them, the runner reads them; not file names.
    "progress.py": "one idea (status lines), not output_files.py's",
}


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def is_exempt(relative: str) -> bool:
    parts = relative.split("/")
    return parts[-1] in {"__init__.py", "__main__.py"} or parts[0] in PER_STEP


def test_no_module_is_too_small():
    small = [
        f"{relative} ({lines(path)} lines)"
        for path in modules()
        if not is_exempt(relative := path.relative_to(SOURCE).as_posix())
        and relative not in KEPT
        and lines(path) < MIN_LINES
    ]
    assert not small, (
        f"modules under {MIN_LINES} lines (merge each into the module of the same idea): "
        + ", ".join(small)
    )


def test_every_kept_module_is_still_small():
    stale = [
        relative
        for relative in KEPT
        if not (SOURCE / relative).is_file() or lines(SOURCE / relative) >= MIN_LINES
    ]
    assert not stale, f"remove from KEPT (gone, or no longer small): {', '.join(stale)}"
