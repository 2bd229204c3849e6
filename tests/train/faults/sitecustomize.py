"""Fault injection for the training tests, loaded by Python at start-up via PYTHONPATH.

A test that puts this folder on PYTHONPATH and sets LLM_PIPELINE_TEST_FAULT to
`<rank>:raise` or `<rank>:hang` makes that one training process fail (or stop answering) when
it reaches the training loop, the way a real bug or a stuck peer would. The product code has no
test hooks; this replaces one of its functions in the chosen process only.
"""

import os

_fault = os.environ.get("LLM_PIPELINE_TEST_FAULT", "")
_rank, _, _kind = _fault.partition(":")
if _fault and os.environ.get("RANK") == _rank:
    import time

    from llm_pipeline.train import stages

    def _failing_train(trainer, resume_from):  # type: ignore[no-untyped-def]
        if _kind == "hang":
            time.sleep(3600)
        raise RuntimeError(f"injected failure on rank {_rank}: the tokenizer exploded")

    stages.train = _failing_train
