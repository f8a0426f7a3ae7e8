"""Graphs and passes: the fixed tree reduction, inputs, the tiled covariance, checkpoints."""
