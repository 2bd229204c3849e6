"""Walking an exception chain: what libraries wrap is found, in order, and a loop ends."""

from collections.abc import Callable

from llm_pipeline.errors import exception_chain, json_path


def _raised(make: Callable[[], None]) -> Exception:
    try:
        make()
    except Exception as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_the_chain_runs_from_the_outer_error_to_the_first() -> None:
    def wrapped() -> None:
        try:
            try:
                raise ConnectionError("no route to host")
            except ConnectionError as inner:
                raise OSError("hub request failed") from inner
        except OSError:
            raise ValueError("could not load the dataset")  # noqa: B904 - a context, not a cause

    chain = list(exception_chain(_raised(wrapped)))
    assert [type(e) for e in chain] == [ValueError, OSError, ConnectionError]
    assert str(chain[-1]) == "no route to host"


def test_an_explicit_cause_comes_before_the_context() -> None:
    cause, context = KeyError("cause"), IndexError("context")
    outer = RuntimeError("outer")
    outer.__cause__, outer.__context__ = cause, context
    assert list(exception_chain(outer)) == [outer, cause]


def test_a_chain_that_loops_yields_each_error_once() -> None:
    first, second = ValueError("first"), ValueError("second")
    first.__context__, second.__context__ = second, first
    assert list(exception_chain(first)) == [first, second]


def test_a_json_path_reads_as_a_user_writes_it() -> None:
    assert json_path(("train", "epochs")) == "train.epochs"
    assert json_path(("instances", 3, "text")) == "instances[3].text"
    assert json_path((0, "summary")) == "[0].summary"
    assert json_path(()) == ""
