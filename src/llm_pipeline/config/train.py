"""How the model is trained: optimisation, precision, DeepSpeed ZeRO and checkpoints."""

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from llm_pipeline.config.base import Section
from llm_pipeline.storage import is_gcs, is_remote

Offload = Literal["none", "cpu", "nvme"]
#: `train.zero_stage`'s default: chosen from the fit check's estimate where the step runs.
AUTO: Literal["auto"] = "auto"
ZeroStage = Literal["auto", 0, 1, 2, 3]
ALL_LINEAR: Literal["all-linear"] = "all-linear"


def checkpoint_folder_problem(folder: str) -> str | None:
    """Why checkpoints cannot go to `folder`, or None: a local folder (Vertex's /gcs/ mount
    included) or `gs://` only, the two places a run can keep a second run out of its folder
    (a kernel lock on disk, a lease with Cloud Storage's generation preconditions)."""
    if not is_remote(folder) or is_gcs(folder):
        return None
    scheme = folder.split("://", 1)[0]
    return (
        f"{folder!r}: checkpoints go to a local folder or gs://; {scheme}:// offers no way to "
        "keep two runs out of one folder (the lease there needs Cloud Storage's generation "
        "preconditions), so they would delete each other's checkpoints"
    )


class LoraSettings(Section):
    """Low-rank adapters (LoRA, through PEFT) instead of training every weight.

    Each targeted linear layer `W` becomes `W + (alpha / r) * B @ A`, with `A` (r x in) and
    `B` (out x r) trained and `W` frozen. The finetune step saves the merged model (the
    updates folded into `W`) as the trained model, and the adapter alone beside it.
    """

    r: int = Field(
        default=16,
        ge=1,
        description="Rank of each update: `--set train.lora.r=8` is all a change of rank takes.",
    )
    alpha: float = Field(
        default=32,
        gt=0,
        description="Scale of the update: it is multiplied by alpha / r (so a new r with the "
        "same alpha changes the scale too).",
    )
    dropout: float = Field(
        default=0.05, ge=0, lt=1, description="Dropout on the adapter's input while training."
    )
    target_modules: Literal["all-linear"] | list[str] = Field(
        default=ALL_LINEAR,
        description='Layers that get an adapter: `"all-linear"` (every linear layer but the '
        'output projection) or a list of module names (`["q", "v"]` for T5, `["q_proj", '
        '"v_proj"]` for OPT and Llama); a name matches a module whose name ends with it.',
    )

    @field_validator("target_modules", mode="before")
    @classmethod
    def _modules(cls, value: Any) -> Any:
        names = value if isinstance(value, list) else None
        if value == ALL_LINEAR or (
            names and all(isinstance(name, str) and name.strip() for name in names)
        ):
            return value
        raise ValueError(
            f'must be "{ALL_LINEAR}" or a non-empty list of module names (e.g. ["q_proj", '
            f'"v_proj"]), got {value!r}'
        )


class DpoSettings(Section):
    """Direct Preference Optimization (task `preference_tuning`): how the policy learns to
    prefer each pair's chosen answer over its rejected one, relative to the model it started
    from (the reference)."""

    beta: float = Field(
        default=0.1,
        gt=0,
        description="How far the policy may move from the reference: the scale of DPO's "
        "implicit reward (beta x the log-probability ratio); smaller lets it move further.",
    )
    loss_type: Literal["sigmoid", "ipo"] = Field(
        default="sigmoid",
        description="`sigmoid`: DPO's loss, -log sigmoid(beta x the margin of log-ratios); "
        "`ipo`: IPO's squared loss on the per-token margin, which does not push the margin "
        "past 1 / (2 beta) (less overfitting on preferences that are nearly certain). Both "
        "as TRL computes them.",
    )


class TrainConfig(Section):
    """Training settings; the DeepSpeed config is generated from these."""

    epochs: float = Field(default=1.0, gt=0, description="Passes over the training split.")
    max_steps: int | None = Field(
        default=None, gt=0, description="Optimizer steps to run; overrides `epochs` when set."
    )
    per_device_batch_size: int = Field(
        default=8, ge=1, description="Examples per process (per GPU) in each micro-batch."
    )
    per_device_eval_batch_size: int | None = Field(
        default=None, ge=1, description="Eval micro-batch; defaults to per_device_batch_size."
    )
    gradient_accumulation_steps: int = Field(
        default=1, ge=1, description="Micro-batches summed before each optimizer step."
    )
    learning_rate: float = Field(default=3e-4, gt=0, description="Peak learning rate (AdamW).")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW decoupled weight decay.")
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup", "polynomial"] = (
        Field(default="linear", description="Learning-rate schedule after warmup.")
    )
    warmup_ratio: float = Field(
        default=0.0, ge=0, lt=1, description="Share of the steps spent warming up."
    )
    warmup_steps: int = Field(default=0, ge=0, description="Warmup steps; wins over warmup_ratio.")
    max_grad_norm: float = Field(
        default=1.0, ge=0, description="Gradient clipping norm; 0 turns clipping off."
    )
    label_smoothing: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Label smoothing factor (preference_tuning refuses it: DPO's loss has no "
        "token labels).",
    )
    seed: int = Field(default=42, description="Seed for weights init, dropout and data order.")
    precision: Literal["auto", "bf16", "fp16", "fp32"] = Field(
        default="auto",
        description="`auto` is bf16 on GPUs that compute in it natively (compute capability "
        "8.0 and up: A100, L4, H100) and fp32 elsewhere (CPU, T4, V100). T5 overflows in "
        "fp16; use it only for models known to be safe.",
    )
    freeze_encoder: bool = Field(
        default=False,
        description="Keep the encoder's weights as loaded and train the rest (decoder, "
        "cross-attention): about a third less work per step, and a pretrained encoder keeps "
        "what it knows when data and steps are few.",
    )
    lora: LoraSettings | None = Field(
        default=None,
        description="Train low-rank adapters (LoRA) instead of every weight, e.g. "
        '`{"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"}`; '
        "`null` (the default) fine-tunes every weight.",
    )
    class_weights: Literal["balanced"] | None = Field(
        default=None,
        description="text_classification: `balanced` weighs each label's loss by "
        "rows / (labels x rows of that label) in the training split (scikit-learn's "
        "definition), so rare labels count as much as common ones; multi-label: each "
        "label's positives weigh its negatives / positives (BCE's `pos_weight`). A label "
        "without training rows (multi-label: without positives or negatives) is refused. "
        "`null` weighs all alike.",
    )
    dpo: DpoSettings = Field(
        default_factory=DpoSettings,
        description="preference_tuning: DPO's settings; another task refuses them when they "
        "differ from the defaults.",
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in backward to save memory."
    )
    use_deepspeed: bool = Field(
        default=True,
        description="false trains with the plain HF Trainer (DDP over several processes), as "
        "`zero_stage: 0` does; a `zero_stage` of 1 to 3 beside it is refused.",
    )
    zero_stage: ZeroStage = Field(
        default=AUTO,
        description='DeepSpeed ZeRO stage. `"auto"` takes, on the machine the finetune step '
        "runs on, the lowest that the fit check's estimate puts within the device's memory "
        "with 10% to spare: 0 (no DeepSpeed, the plain Trainer) when the whole training "
        "state fits, else ZeRO-1, 2, 3, then optimizer offload, then optimizer and parameter "
        "offload to CPU (`--check-fit` prints the choice and why). `0`-`3` fix the stage; "
        "`train.deepspeed_config`'s own stage wins over `auto`.",
    )
    offload_optimizer: Offload = Field(
        default="none", description="Where optimizer states live: GPU (`none`), `cpu` or `nvme`."
    )
    offload_param: Offload = Field(
        default="none", description="Where ZeRO-3 parameters live when idle: `none`, `cpu`, `nvme`."
    )
    nvme_path: str | None = Field(default=None, description="Local NVMe folder for `nvme` offload.")
    deepspeed_config: str | None = Field(
        default=None,
        description="Your own DeepSpeed JSON (path relative to the config file, or `gs://`); "
        "used whole instead of the generated one.",
    )
    compile: Literal[False, True, "blocks"] = Field(
        default=False,
        description="Causal LMs and seq2seq models: compile the model with torch.compile "
        "(TrainingArguments' `torch_compile`): fewer, fused kernels, so fewer for the host to "
        "issue. On one H100 (a 1.1B Llama, packed 1024-token rows, full fine-tuning, no "
        "DeepSpeed) it trained at 1.41x the tokens/s with 0.80x the peak memory, after about "
        "50 s of compiling in the first steps. `blocks` compiles each repeated block (a "
        "decoder layer, a T5 block) instead of the whole model, once for all its copies "
        "(accelerate's regional compilation, as torchtune compiles per layer); what runs "
        "between blocks (embeddings, the last norm, the head and loss) stays eager. On this "
        "project's CPU (benchmarks/compile_blocks.py) a 22-layer Llama's first step compiled "
        "in 0.34-0.39x the time by blocks, and a T5's in a third of the time it takes whole: "
        "compile a T5 by blocks. Rows padded to their batch's longest are compiled for any "
        "length from the first step; packed rows for their one length. Off by default: "
        "measured on a GPU for the one case above; on one H200 a T5-large by blocks compiled "
        "for about 113 s over its first five steps (before lengths were dynamic from the "
        "first compile), and its steady speed, LoRA's and the Llama's by blocks are "
        "unmeasured on a GPU.",
    )
    kernels: Literal["liger"] | None = Field(
        default=None,
        description="Causal LMs on a CUDA GPU: `liger` swaps in Liger's fused Triton kernels "
        "(RMSNorm, RoPE, SwiGLU) for the model types Liger supports (Llama, Mistral, Qwen2, "
        "Gemma, ...), through TrainingArguments' `use_liger_kernel`. It needs the optional "
        "liger-kernel package in the training image (`pip install liger-kernel`; not in "
        "requirements.lock, since it runs on Triton, which comes with torch's CUDA build: "
        "containers/README.md shows an image with it). Its fused linear cross-entropy "
        "computes the loss without making the logits whole, so `label_smoothing` must stay 0. "
        "Opt-in: not yet measured on a GPU (its one try there failed in the evaluation, fixed "
        "since). `null` (the default): the models' own kernels.",
    )
    group_by_length: bool = Field(
        default=True, description="Batch examples of similar length to cut padding."
    )
    logging_steps: int = Field(default=10, ge=1, description="Steps between loss logs.")
    eval_steps: int | None = Field(
        default=None, ge=1, description="Steps between evaluations; `null` evaluates per epoch."
    )
    save_steps: int = Field(
        default=500,
        ge=1,
        description="Steps between checkpoints: the most work a crash loses (a SIGTERM, as "
        "Spot preemption sends, saves at the next step instead).",
    )
    save_total_limit: int = Field(
        default=2, ge=1, description="Complete checkpoints kept; older ones are deleted."
    )
    checkpoint_dir: str | None = Field(
        default=None,
        description="Checkpoint folder: local or `gs://` (other stores are refused: nothing "
        "there keeps two runs out of one folder); on Vertex `AIP_CHECKPOINT_DIR` wins.",
    )
    collective_timeout_s: int = Field(
        default=1800,
        ge=10,
        description="A collective (all-reduce, barrier) that waits longer fails the step.",
    )
    startup_timeout_s: int = Field(
        default=1800,
        ge=10,
        description="A training process that has not reached its first step after this long "
        "fails the step, naming what it was waiting on (a build lock, a peer, a download).",
    )

    @field_validator("checkpoint_dir")
    @classmethod
    def _checkpoint_dir_scheme(cls, value: str | None) -> str | None:
        problem = checkpoint_folder_problem(value) if value else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("zero_stage", mode="before")
    @classmethod
    def _stage_not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # JSON's true would pass as the literal 1
            raise ValueError(f'must be "auto", 0, 1, 2 or 3, got {str(value).lower()}')
        return value

    @model_validator(mode="after")
    def _offload_rules(self) -> "TrainConfig":
        if "nvme" in (self.offload_optimizer, self.offload_param) and not self.nvme_path:
            raise ValueError("nvme offload needs nvme_path (a local NVMe folder)")
        if not self.use_deepspeed and self.zero_stage not in (0, AUTO):
            raise ValueError(
                f"zero_stage {self.zero_stage} needs DeepSpeed, which use_deepspeed false "
                "turns off: drop one of them (zero_stage 0 is the plain Trainer)"
            )
        if not self.deepspeed_on:
            offloaded = [
                name
                for name in ("offload_optimizer", "offload_param")
                if getattr(self, name) != "none"
            ]
            if offloaded:
                off = "zero_stage 0" if self.use_deepspeed else "use_deepspeed false"
                raise ValueError(
                    f"{' and '.join(offloaded)} needs DeepSpeed, which {off} turns off"
                )
        if self.kernels == "liger" and self.label_smoothing:
            raise ValueError(
                "label_smoothing: Liger's fused loss (kernels: liger) does not smooth labels; "
                "drop one of them"
            )
        if self.offload_param != "none" and self.zero_stage not in (3, AUTO):
            raise ValueError(
                f"offload_param needs zero_stage 3 (or auto), got zero_stage {self.zero_stage}"
            )
        return self

    @property
    def deepspeed_on(self) -> bool:
        """Whether DeepSpeed trains: not with `use_deepspeed` false or `zero_stage` 0. Under
        `auto` this says yes until the finetune job resolves the stage (`train/zero_stage.py`),
        which the training processes only ever see resolved."""
        return self.use_deepspeed and self.zero_stage != 0
