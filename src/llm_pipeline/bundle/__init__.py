"""The offline GPU bundle: what a GPU machine with torch but no internet needs to run the
project, built here in one folder (`python -m llm_pipeline.bundle build OUT`), installed and
run there with the bundle's `run.sh`. build.py says what goes in and why."""
