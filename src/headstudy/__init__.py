"""headstudy: does attention with four heads beat one head at the same width?"""
