"""Fault injection for the training tests, loaded by Python at start-up via PYTHONPATH.

A test that puts this folder on PYTHONPATH and sets LLM_PIPELINE_TEST_FAULT to
`<rank>:raise`, `<rank>:hang` or `<rank>:hang-startup` makes that one training process fail
(or stop answering) when it reaches the training loop, or hang before joining the process
group, the way a real bug, a stuck peer or a wedged start-up would. `<rank>:nan-loss@3,5`
makes that process's loss NaN in optimizer steps 3 and 5 (counted from 1), so their
gradients are NaN, as an overflow in a real run would make them. The product code has no
test hooks; this replaces one of its functions in the chosen process only.
"""

import os

_fault = os.environ.get("LLM_PIPELINE_TEST_FAULT", "")
_rank, _, _kind = _fault.partition(":")
if _fault and os.environ.get("RANK") == _rank:
    import time

    if _kind == "hang-startup":
        from llm_pipeline.train import process_group

        def _hanging_join(spec):  # type: ignore[no-untyped-def]
            time.sleep(3600)

        process_group.join = _hanging_join
    elif _kind.startswith("nan-loss@"):
        from llm_pipeline.train import trainer

        _steps = {int(step) for step in _kind.split("@", 1)[1].split(",")}
        _compute_loss = trainer.FinetuneTrainer.compute_loss

        def _nan_loss(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            result = _compute_loss(self, *args, **kwargs)
            if self.state.global_step + 1 not in _steps:
                return result
            if isinstance(result, tuple):
                return (result[0] * float("nan"), *result[1:])
            return result * float("nan")

        trainer.FinetuneTrainer.compute_loss = _nan_loss
    else:
        # The Trainer's class, not worker.train: the worker runs as __main__ (`python -m`), a
        # module object of its own, while every module shares llm_pipeline.train.trainer.
        from llm_pipeline.train import trainer

        def _failing_train(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if _kind == "hang":
                time.sleep(3600)
            raise RuntimeError(f"injected failure on rank {_rank}: the tokenizer exploded")

        trainer.FinetuneTrainer.train = _failing_train
