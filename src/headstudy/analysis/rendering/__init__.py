"""The report's inputs read and its outputs written: the one reader of its numeric inputs, one
format per kind of number and name, the headline numbers' files, and markdown and HTML pages."""
