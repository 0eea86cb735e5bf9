"""Bookkeeping that no stage output depends on: MLflow tracking, progress bars, thread counts
and the guards around outputs. No stage depends on this folder, so a change here reruns nothing."""
