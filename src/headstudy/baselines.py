"""Stage `baselines`: unigram and bigram models (add-k smoothed) on the same tokenizer,
scored on the same test tokens as the transformers: every token after the first, once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from headstudy.common.files import write_json
from headstudy.execution.guards import refuse_pipeline_outputs
from headstudy.formats.prepared import check_length, check_vocab_size, load_stats, load_tokens, tokens_path


def unigram_nll(train: np.ndarray, test: np.ndarray, vocab_size: int, add_k: float) -> float:
    counts = np.bincount(train, minlength=vocab_size) + add_k
    log_probs = np.log(counts / counts.sum())
    return float(-log_probs[test[1:]].sum())


def bigram_nll(train: np.ndarray, test: np.ndarray, vocab_size: int, add_k: float) -> float:
    pairs = train[:-1].astype(np.int64) * vocab_size + train[1:]
    counts = np.bincount(pairs, minlength=vocab_size * vocab_size).reshape(vocab_size, vocab_size) + add_k
    log_probs = np.log(counts / counts.sum(axis=1, keepdims=True))
    return float(-log_probs[test[:-1], test[1:]].sum())


def baselines(config: DictConfig) -> dict:
    refuse_pipeline_outputs(config, "baselines")
    prepared = Path(config.paths.prepared)
    check_vocab_size(prepared, config.data.vocab_size, "data.vocab_size")
    train = np.asarray(load_tokens(prepared, "train"), dtype=np.int64)
    test = np.asarray(load_tokens(prepared, "test"), dtype=np.int64)
    check_length(test, 2, tokens_path(prepared, "test"), "a test perplexity")
    stats = load_stats(prepared)["splits"]["test"]
    words = stats["words"] + stats["lines"]  # one end-of-line per line, as for the models
    vocab_size, add_k = config.data.vocab_size, config.baselines.add_k
    results = {}
    for name, nll in (("unigram", unigram_nll), ("bigram", bigram_nll)):
        total = nll(train, test, vocab_size, add_k)
        results[name] = {
            "add_k": add_k,
            "test_ppl": float(np.exp(total / (len(test) - 1))),
            "test_word_ppl": float(np.exp(total / words)),
        }
        print(f"baselines: {name}: test perplexity {results[name]['test_ppl']:.2f}")
    write_json(Path(config.paths.baselines), results)
    return results


def main(config: DictConfig) -> None:
    baselines(config)
