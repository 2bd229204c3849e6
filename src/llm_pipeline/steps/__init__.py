"""What each KFP component runs: parse the component's inputs into typed config at the
edge, call the library, record metrics and the resolved config beside the outputs.

Component bodies are shipped to the container as source text, so they can only import;
these functions are what they import.

A step's parameters are written once, in its component's signature (`components/X.py`):
KFP reads the interface from it and the Vertex UI shows its docstring, so it has to stay
there. The component's body names none of them again: its first statement is
`arguments = dict(locals())` (the parameters, in the signature's order), and it hands that
mapping to `steps/X.py::run_X`. The step reads each argument where it uses it, through
`steps/artifacts.py::Arguments`, whose methods say what the argument is (`text`, `artifact`,
`metrics`): mypy knows the type of every value the step uses, and at run time a missing
argument, or one of another kind than the step expects, fails at once, naming it. A
second list of the names (keyword parameters, a TypedDict, a dataclass) would be checked
against nothing but itself; the step tests call the components' functions
(`components.X.python_func`) instead, so a name the step reads that its component lacks
fails there.

`steps/reporting.py::reports_user_errors` wraps every `run_X`: it turns the mapping into
`Arguments`, and a user's mistake into one line naming the step.
"""
