"""Code every stage shares: the model, the data on disk, config, tracking and training."""
