"""What a run did, counted across ranks: its wall time, parameters, samples and tokens.

`metrics` turns these into throughput and MFU; this module does the measuring, which needs
the model, the Trainer and the process group.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from llm_pipeline.train.metrics import FlopParameters, RunCounts
from llm_pipeline.train.trainer import FinetuneTrainer


def compiled_frames() -> int:
    """Frames torch.compile has compiled in this process so far, recompiles included; 0 where
    it never loaded. Torch keeps the count in `torch._dynamo.utils.counters` (internal, but
    what its own tests and logs read); read without importing dynamo, which costs seconds."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    frames = counters.get("frames") if isinstance(counters, dict) else None
    return int(frames.get("total", 0)) if frames else 0


class Clock(TrainerCallback):
    """Wall time of the training loop itself: after engine setup, before the final save.

    Also the time after warm-up (`steady_seconds`, over `steady_steps`): from the end of the
    last step that warmed up, the first step (kernels chosen, the allocator grown, loader
    workers started) or a later one by whose end torch.compile had compiled again
    (`compiled_frames`: a compiled model compiles again at a new batch shape, and for
    evaluation; on one H200 a T5-large compiled by blocks spent about 113 s in its first
    five steps, so a window from the first step's end read 1% of the GPU where the steps
    after ran near eager's pace), to the end of the run's planned last step, before the
    evaluation and save that follow it (the loop's end where the run stopped early). A
    short run's average understates what a long one gets. The GPU is waited for at each of
    those ends (the steps are queued, not waited for), so the window holds whole steps.

    On a GPU it also times the step after the last warm-up step alone (`host_share`): the
    host's time to issue it (its operations are queued, not waited for) against the time
    until the GPU has run it, both from an empty queue (the warm-up step's end is waited
    for). Near 1, the GPU waited on the host: the step runs at the pace the host issues
    operations, and fewer, larger ones (compiled or fused kernels, larger micro-batches) are
    what makes it faster. Well below 1, the GPU's own work sets the pace. One more wait, at
    that step's end. A step that waits on the GPU within itself (DeepSpeed's overflow check
    reads the gradient norm back) reads near 1 whatever sets its pace.
    """

    def __init__(self) -> None:
        self.started: float | None = None
        self.ended: float | None = None
        self.warm_step_ended: float | None = None  # the end of the last warm-up step
        self.warm_steps = 0  # steps up to and including it
        self.last_step_ended: float | None = None  # the run's planned last step, waited for
        self.steps = 0  # optimizer steps of this run (a resumed run counts its own)
        self._frames = 0  # compiled_frames() at the last step's end
        self._step_began: float | None = None  # the step after a warm-up step, timed alone
        self.host_share: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()
        self._frames = compiled_frames()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.steps > 0 and self.steps == self.warm_steps and args.device.type == "cuda":
            self._step_began = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.steps += 1
        began, self._step_began = self._step_began, None
        # Compiled since the last step's end: in this step, or in an evaluation before it.
        frames = compiled_frames()
        compiled, self._frames = frames != self._frames, frames
        cuda = args.device.type == "cuda"
        if self.steps == 1 or compiled:
            if cuda:
                torch.cuda.synchronize(args.device)
            self.warm_step_ended = time.perf_counter()
            self.warm_steps = self.steps
        elif began is not None:
            issued = time.perf_counter() - began
            torch.cuda.synchronize(args.device)
            ran = time.perf_counter() - began
            self.host_share = issued / ran if ran > 0 else None
        max_steps = getattr(state, "max_steps", 0) or 0
        if 0 < max_steps <= getattr(state, "global_step", 0) and self.steps > self.warm_steps:
            # The window ends here: the evaluation and save after the last step are not
            # training (a compiled model compiles its evaluation graphs there, too).
            if cuda:
                torch.cuda.synchronize(args.device)
            self.last_step_ended = time.perf_counter()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ended = time.perf_counter()

    @property
    def seconds(self) -> float:
        if self.started is None or self.ended is None:
            return 0.0
        return self.ended - self.started

    @property
    def steady_steps(self) -> int:
        """Steps after the last warm-up step."""
        return self.steps - self.warm_steps

    @property
    def steady_seconds(self) -> float | None:
        """Seconds from the end of the last warm-up step to the end of the last step (of the
        training loop, where the run stopped before its planned last step); None with no
        step after warm-up."""
        end = self.last_step_ended or self.ended
        if self.steady_steps < 1 or self.warm_step_ended is None or end is None:
            return None
        return end - self.warm_step_ended


#: Decoder cross-attention key and value projections, which run on the encoder's output (one
#: per source token): T5's `EncDecAttention.k/.v`, BART-style `encoder_attn.k_proj/.v_proj`,
#: BERT-as-decoder's `crossattention.self.key/.value`.
#: A LoRA-adapted projection holds its weight as `<name>.base_layer.weight` and its adapter as
#: `<name>.lora_A.default.weight`: both are that projection's parameters.
_CROSS_ATTENTION_KEY_VALUE = re.compile(
    r"(EncDecAttention|encoder_attn|crossattention|cross_attn|cross_attention)\."
    r"(?:.*\.)?(k|v|k_proj|v_proj|key|value)\.(?:(?:base_layer|lora_[AB]\.\w+)\.)?(weight|bias)$"
)


def count_parameters(model: torch.nn.Module, *, trainable_only: bool = False) -> int:
    """Parameters of the model (adapters included), or those that train; under ZeRO-3 each
    holds its full size in `ds_numel`, not in its partition."""
    return sum(_numel(p) for p in model.parameters() if p.requires_grad or not trainable_only)


def flop_parameters(model: torch.nn.Module) -> FlopParameters:
    """The model's matmul parameters, split by the tokens that pass through them.

    Encoder-decoder: source side, the encoder and the decoder's cross-attention keys and
    values; target side, the rest of the decoder and the output projection (LM head).
    Decoder-only (a causal LM): every token read, prompt and response alike, passes through
    every layer and the LM head (logits are computed at every position), so it is all source
    side. Either way the LM head is counted once even where it shares its weight with the
    input embedding, and embedding tables (token, position) are lookups, not matmuls, and are
    left out.
    """
    lookups = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    }
    get_output = getattr(model, "get_output_embeddings", None)
    output = get_output() if callable(get_output) else None
    head = list(output.parameters()) if isinstance(output, torch.nn.Module) else []
    get_encoder = getattr(model, "get_encoder", None)
    is_encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    encoder = get_encoder() if callable(get_encoder) and is_encoder_decoder else None
    encoder_ids = {id(p) for p in encoder.parameters()} if encoder is not None else set()
    head_ids = {id(p) for p in head}
    source = target = 0
    for name, param in model.named_parameters():
        if id(param) in lookups or id(param) in head_ids:
            continue
        if encoder is None or id(param) in encoder_ids or _CROSS_ATTENTION_KEY_VALUE.search(name):
            source += _numel(param)
        else:
            target += _numel(param)
    head_size = sum(_numel(p) for p in head)
    if encoder is None:
        return FlopParameters(per_source_token=source + head_size, per_target_token=0)
    return FlopParameters(per_source_token=source, per_target_token=target + head_size)


def _numel(param: torch.nn.Parameter) -> int:
    return int(getattr(param, "ds_numel", param.numel()))


def gather_counts(trainer: FinetuneTrainer, clock: Clock) -> RunCounts:
    """Samples and tokens summed over every rank; the slowest rank's time is the run's."""
    samples, source_tokens, target_tokens = trainer.trained_counts()
    device = trainer.args.device
    totals = torch.tensor([samples, source_tokens, target_tokens], dtype=torch.long, device=device)
    dist.all_reduce(totals)
    steady, share = clock.steady_seconds, clock.host_share
    # The largest of each, the steady steps' fewest (as their negative): the slowest rank's.
    slowest = torch.tensor(
        [
            clock.seconds,
            -1.0 if steady is None else steady,
            -1.0 if share is None else share,
            -float(clock.steady_steps),
        ],
        dtype=torch.float64,
        device=device,
    )
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    model = trainer.model  # the bare model; the DeepSpeed engine is `model_wrapped`
    assert isinstance(model, torch.nn.Module)
    return RunCounts(
        samples=int(totals[0]),
        source_tokens=int(totals[1]),
        target_tokens=int(totals[2]),
        seconds=float(slowest[0]),
        steady_seconds=float(slowest[1]) if slowest[1] > 0 else None,
        host_share=float(slowest[2]) if slowest[2] >= 0 else None,
        steps=clock.steps,
        steady_steps=int(-slowest[3]),
        total_parameters=count_parameters(model),
        trainable_parameters=count_parameters(model, trainable_only=True),
        flop_parameters=flop_parameters(model),
        decoder_only=not getattr(getattr(model, "config", None), "is_encoder_decoder", False),
        world_size=dist.get_world_size(),
        device_name=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        peak_memory_reserved=peak_memory_reserved(device),
    )


def peak_memory_reserved(device: torch.device) -> int | None:
    """The most memory any rank's CUDA caching allocator held, in bytes, None off CUDA.

    `torch.cuda.max_memory_reserved` over the rank's life: each run starts fresh ranks, so it
    is the run's peak (model, optimizer states, activations, allocator slack), what the fit
    check estimates; nvidia-smi would add the CUDA context. Every rank must call it.
    """
    if device.type != "cuda":
        return None
    peak = torch.tensor([torch.cuda.max_memory_reserved(device)], dtype=torch.long, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return int(peak[0])
