"""The fit check: whether a config's models fit the machines it names, before it runs.

`check.check_fit(config, target=...)` estimates peak memory per GPU and host RAM for
finetune, evaluate and serve against the Vertex machine types (or this computer for a local
run); `check.enforce` refuses a misfit as a ConfigError (exit 2); `table.format_table`
prints the table. The package re-exports nothing: the finetune job imports `fit.stage`
(the ZeRO stage `auto` takes), and a re-export of `check` here would make every such import
run the whole check and, through it, the train package that imports `fit.stage` back.
"""
