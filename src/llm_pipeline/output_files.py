"""Names of the pipeline's steps and of the files they write into their output folders, for
every layer that reads them.

A module of constants only: the CLI and the run report read these files, and importing the
modules that write them would load torch just to learn a file name. The steps' names are
here, at the bottom, because every layer spells them: the graph and its Vertex settings, the
console and the summary of a local run, and the library's messages about which step wrote
a folder.
"""

from enum import Enum


class Step(Enum):
    """The pipeline's steps, in the order they run; the one table of their names.

    The value is the component's function name, which is also its module's name under
    `components/` and `steps/` and its compiled spec's under `components/`.
    """

    CONFIGURE = "configure"
    DOWNLOAD = "download"
    PREPROCESS = "preprocess"
    FINETUNE = "finetune"
    EVALUATE = "evaluate"
    SHOULD_DEPLOY = "should_deploy"
    DEPLOY = "deploy"
    #: A preflight's exit task: it runs once the others have ended, however they ended.
    UNDEPLOY_PREFLIGHT = "undeploy_preflight"

    @property
    def function(self) -> str:
        """The component's function name (`should_deploy`)."""
        return self.value

    @property
    def display_name(self) -> str:
        """The name the run shows (`should-deploy`): KFP's task name for the component (its
        function name with dashes), which the graph also sets as the display name; the local
        run's folder for the step, the console's and the summary's line."""
        return self.value.replace("_", "-")


#: Written into every output folder: the settings it was made with (STYLE #6).
RESOLVED_CONFIG_FILE = "llm_pipeline_config.json"
#: Beside a failed step's outputs: its one-line error, which the run summary repeats.
ERROR_FILE = "error.txt"
#: In the model folder: the Trainer's log history (train and eval loss per logged step).
TRAINING_LOG_FILE = "training_log.json"
#: In evaluate's predictions folder: one row per example, the flat metrics, the HTML report.
PREDICTIONS_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"
EVALUATION_REPORT_FILE = "report.html"
#: Beside preprocess's tokenized data: the resolved lengths, per-split statistics and, for a
#: classifier, its label set (tasks/text_classification/labels.py reads it back).
PREPROCESS_REPORT_FILE = "preprocess.json"
#: Beside preprocess's tokenized data: the download step's note on each evaluation split (its
#: rows that are also train rows), by split; evaluate's report shows the scored split's.
DATA_NOTES_FILE = "data_notes.json"
#: The key of a head's label set in the preprocess report (a task with labels writes it).
LABEL_SET_KEY = "label_set"
#: In evaluate's predictions folder, for a classifier: the confusion matrix and each label's
#: precision, recall, F1 and rows.
CONFUSION_MATRIX_FILE = "confusion_matrix.json"
#: The trained model artifact's metadata key naming the registered version (`model@version`)
#: it started from (`model.source: "registry:..."`): finetune writes it and deploy records it
#: on the new version. Here, not in steps/finetune.py, so that the deploy step's process does
#: not import the training code (about 4 s of torch, transformers' Trainer and peft) for it.
STARTED_FROM_KEY = "started_from"
