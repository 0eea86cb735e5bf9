"""Composing conf/ with params.yaml and overrides (Hydra), and checking the result. Only the
configure stage depends on this folder: it writes the resolved config file of every stage, and
the stages depend on those files, so a change here that resolves to the same settings reruns
nothing."""
