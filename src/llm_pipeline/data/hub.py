"""Load a dataset from the Hugging Face hub, and say plainly when the hub cannot be reached.

Many machines that run this pipeline have no internet. There `datasets` retries for
tens of seconds and then reports a cache miss; a user needs to hear instead that the
machine is offline and how to use a local copy.
"""

import socket

import datasets
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

from llm_pipeline.errors import DataError, exception_chain

#: Seconds to wait for the hub before calling the machine offline.
PROBE_TIMEOUT_S = 10.0


def load_hub_dataset(
    name: str, subset: str | None, revision: str | None
) -> dict[str, datasets.Dataset]:
    """Every split of hub dataset `name` (configuration `subset`, pinned to `revision`).

    Asks the hub about the dataset first, without retries: an offline machine fails in a
    second with advice, and a misspelt id or revision is named as such. In offline mode
    (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) the hub is not asked and the local datasets
    cache is used.
    """
    if not datasets.config.HF_HUB_OFFLINE:
        _check_on_hub(name, subset, revision)
    try:
        loaded = datasets.load_dataset(name, subset, revision=revision)
    except Exception as exc:  # only network failures are translated
        if _is_network_error(exc):
            raise DataError(_offline_message(name, subset, repr(exc))) from exc
        raise
    assert isinstance(loaded, datasets.DatasetDict)  # no `split=`, not streaming
    return dict(loaded)


def _check_on_hub(name: str, subset: str | None, revision: str | None) -> None:
    try:
        HfApi().dataset_info(name, revision=revision, timeout=PROBE_TIMEOUT_S)
    except GatedRepoError:
        return  # visible but gated: load_dataset's own message says how to get access
    except RepositoryNotFoundError:
        raise DataError(
            f"data.dataset: {name!r} is not a local file or folder, and the Hugging Face hub "
            f"at {constants.ENDPOINT} has no dataset by that id (for a private dataset, log "
            "in with `hf auth login` or set HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise DataError(
            f"data.revision: hub dataset {name!r} has no revision {revision!r} "
            "(a branch, tag or commit)"
        ) from None
    except Exception as exc:  # anything else is for load_dataset to report
        if _is_network_error(exc):
            raise DataError(_offline_message(name, subset, repr(exc))) from exc


def _is_network_error(exc: BaseException) -> bool:
    """Whether `exc`, or anything it wraps, is a failure to reach a server."""
    for current in exception_chain(exc):
        if isinstance(current, (ConnectionError, TimeoutError, socket.gaierror)):
            return True
        # httpx (huggingface_hub 1.x), httpx2 (2.x) and requests (0.x) use their own
        # classes; matching by name keeps this working across those versions.
        if any(
            cls.__name__ in {"TransportError", "ConnectionError", "Timeout"}
            for cls in type(current).__mro__
        ):
            return True
    return False


def _offline_message(name: str, subset: str | None, reason: str) -> str:
    load_args = ", ".join(repr(arg) for arg in (name, subset) if arg is not None)
    if datasets.config.HF_HUB_OFFLINE:
        problem = (
            f"hub dataset {name!r} is not in the local datasets cache, and offline mode "
            "(HF_HUB_OFFLINE or HF_DATASETS_OFFLINE) keeps this machine from asking the "
            "Hugging Face hub"
        )
    else:
        problem = (
            f"this machine cannot reach the Hugging Face hub at {constants.ENDPOINT} to "
            f"load {name!r}; it looks offline ({reason})"
        )
    return (
        f"data.dataset: {problem}. Point data.dataset at a local copy instead: on a "
        f"machine with network run `datasets.load_dataset({load_args}).save_to_disk('DIR')`, "
        "copy DIR to this machine (or to a gs:// or s3:// bucket) and set data.dataset "
        "to its path. Files work too: a folder with train.jsonl, validation.jsonl, "
        "test.jsonl (or csv, parquet)."
    )
