"""Settings: composing conf/ with params.yaml and overrides (Hydra) and checking the result, for
the configure stage, which writes the resolved config file of every stage; and the boundary where
a training's config becomes the typed settings of the recipe in weights/ (training.py)."""
