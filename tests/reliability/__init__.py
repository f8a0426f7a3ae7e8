"""Reliability: bad input ends in one line, and no run destroys a file it was not asked to write."""
