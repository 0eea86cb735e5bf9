"""Nested mappings by their dotted keys."""

from __future__ import annotations


def flatten(tree, prefix: str = "") -> dict:
    """{"model.n_heads": 4, ...}: every leaf of a nested mapping by its dotted key (a list is a leaf)."""
    if isinstance(tree, dict):
        return {key: value for name, child in tree.items() for key, value in flatten(child, f"{prefix}{name}.").items()}
    return {prefix.rstrip("."): tree}
