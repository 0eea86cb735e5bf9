"""Generated tasks: token streams whose right answers are known by construction."""
