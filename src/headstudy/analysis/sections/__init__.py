"""The report's sections, one module per kind of study or question: its tables, sentences and
figures as blocks for rendering/render.py."""
