"""Measures of trained models, on test tokens: perplexity, what each attention head follows and
what it is worth, accuracy at a task's answers, and the causal check of zeroing heads. The evaluate,
inspect, score, ablate and answers stages run them."""
