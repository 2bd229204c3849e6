"""The page's frame around each task's widget (`Task.serving_widget`), without a browser:
every marker a widget uses is filled, and what fills one is never read for markers again."""

from __future__ import annotations

import re
from typing import Any

import pytest

from llm_pipeline.serve.page import render_page
from llm_pipeline.serve.settings import Settings
from llm_pipeline.tasks import TASKS

#: What a loaded classifier says of itself (`describe`), as far as the page reads it.
LABELS: dict[str, Any] = {"labels": ["a", "b"], "multi_label": False, "threshold": 0.5}


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("token", [None, "t"])
@pytest.mark.parametrize("model", [None, {"model": "T5"}, LABELS])
def test_every_tasks_page_fills_every_marker(
    task: str, token: str | None, model: dict[str, Any] | None
) -> None:
    page = render_page(Settings(task=task, token=token), model)
    assert re.findall(r"__[A-Z_]+__", page) == []
    assert page.count("<style>") == 1 and page.count('id="form"') == 1


def test_a_label_that_looks_like_a_marker_is_shown_as_it_is() -> None:
    model = {**LABELS, "labels": ["__OUTPUT__", "__PREDICT__"]}
    page = render_page(Settings(task="text_classification"), model)
    assert '"labels": ["__OUTPUT__", "__PREDICT__"]' in page
