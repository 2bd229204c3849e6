"""The docs that are generated must match the code they describe."""

from pathlib import Path

from llm_pipeline.cli.docs import with_generated

REPO = Path(__file__).resolve().parents[2]


def test_readme_generated_tables_are_current() -> None:
    """The config reference and the prediction server's settings match the code."""
    readme = (REPO / "README.md").read_text()
    assert with_generated(readme) == readme, "README's generated tables are stale: run `make docs`"


def test_readme_names_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    makefile = (REPO / "Makefile").read_text()
    assert "\ndemo:" in makefile and "\ntest:" in makefile
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_compiled_components_are_current(tmp_path: Path) -> None:
    from llm_pipeline.runner.compile import compile_components

    for fresh in compile_components(tmp_path):
        shipped = REPO / "components" / fresh.name
        assert shipped.exists(), f"components/{fresh.name} missing: run `make docs`"
        assert shipped.read_text() == fresh.read_text(), f"{shipped} is stale: run `make docs`"
