"""The figures, as PNG files: the report's, the inspect stage's heads, the spotlight study's clues,
and what every figure shares (plotting.py)."""
