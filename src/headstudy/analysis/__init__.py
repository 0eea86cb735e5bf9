"""Analysis of trained models: perplexity, statistics, figures and the report's pages. A change
here reruns evaluate, inspect or report (whichever imports the changed file), never training."""
