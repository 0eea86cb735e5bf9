"""Code that shapes the trained weights: the model, the batches and the training loop.

A change here retrains every model (the train stages depend on this folder). It imports nothing
from bookkeeping/ or analysis/, and knows nothing of Hydra or MLflow; tests/test_dvc_graph.py
checks both."""
