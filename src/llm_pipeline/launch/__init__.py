"""Starting the processes of a multi-process job and seeing them through: where this node sits
in the cluster, the torchrun or DeepSpeed command line, SSH between nodes for DeepSpeed's
launcher, children that die with their parent, and one message for a failed rank.

Training (`train.job`) and sharded evaluation (`evaluation.evaluate_model`) both launch through it;
nothing here knows what the ranks compute. Modules import only the standard library at the top,
so building a command line for `--dry-run` or a compiled spec stays cheap.
"""
