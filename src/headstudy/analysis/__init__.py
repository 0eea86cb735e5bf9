"""Analysis of trained models, by concern: measures/ (measuring trained models), statistics.py and
gap_share.py (the maths of comparisons over seeds), sections/ (the report's sections), figures/
and rendering/ (the report's inputs read, its numbers worded, its pages written). A change here
reruns the stages whose code it changes, never training."""
