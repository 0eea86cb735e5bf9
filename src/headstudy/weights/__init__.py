"""Code that shapes the trained weights: the typed settings, the model, the batches, the training
loop and the one recipe that runs them.

A change of its arithmetic retrains every model that reaches it (the stages depend on the
fingerprints of the code they run). It imports nothing from bookkeeping/ or analysis/, and knows
nothing of Hydra or MLflow; tests/test_dvc_graph.py checks both."""
