"""One docstring pair: what the docstring datasets are built from and what their cache holds.

In a module of its own so that data/docstrings.py (which parses) and
data/docstring_cache.py (which stores the parse) can both use it without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DocstringPair:
    """One pair: the documented object's qualified name, the docstring's prose, its summary."""

    name: str
    body: str
    summary: str
    #: The dotted module the object lives in (`json.decoder`); "" when unknown.
    module: str = ""
    #: True for the module's own docstring (then `name` is the module file's stem).
    is_module: bool = False

    @property
    def qualified_name(self) -> str:
        """`json.decoder.JSONDecoder.raw_decode`; the module itself for its own docstring."""
        if self.is_module or not self.module:
            return self.module or self.name
        return f"{self.module}.{self.name}"

    @property
    def document(self) -> str:
        return f"{self.name}: {self.body}"
