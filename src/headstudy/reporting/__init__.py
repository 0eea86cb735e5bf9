"""Statistics and figures of the reports."""
