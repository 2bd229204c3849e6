"""Names of the files steps write into their output folders, for every layer that reads them.

A module of constants only: the CLI and the run report read these files, and importing the
modules that write them would load torch just to learn a file name.
"""

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
#: classifier, its label set (data/labels.py reads it back).
PREPROCESS_REPORT_FILE = "preprocess.json"
#: In evaluate's predictions folder, for a classifier: the confusion matrix and each label's
#: precision, recall, F1 and rows.
CONFUSION_MATRIX_FILE = "confusion_matrix.json"
