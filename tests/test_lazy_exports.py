"""The packages whose exports need torch, FastAPI or httpx load them on first use only
(`llm_pipeline.lazy_exports`), so that their light modules stay light to import."""

import subprocess
import sys

import pytest

import llm_pipeline.serve
from llm_pipeline import lazy_exports


def test_importing_the_packages_loads_no_heavy_library():
    probe = (
        "import sys, llm_pipeline.train, llm_pipeline.evaluation, llm_pipeline.serve\n"
        "print(sorted({'torch', 'fastapi', 'httpx'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_an_export_loads_on_first_use_and_an_unknown_name_is_refused():
    assert llm_pipeline.serve.create_app.__module__ == "llm_pipeline.serve.app"
    getattr_ = lazy_exports("pkg", {"dumps": "json"})
    assert getattr_("dumps").__module__ == "json"
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'loads'"):
        getattr_("loads")
