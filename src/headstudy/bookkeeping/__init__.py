"""Bookkeeping that no stage output depends on: MLflow (the store, the runs, the saved views),
provenance, and the terminal (progress, the study's time left). The fingerprints do not follow
calls into this folder, so a change here reruns nothing."""
