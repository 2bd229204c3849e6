"""What each KFP component runs: parse the component's inputs into typed config at the
edge, call the library, record metrics and the resolved config beside the outputs.

Component bodies are shipped to the container as source text, so they can only import;
these functions are what they import.
"""
