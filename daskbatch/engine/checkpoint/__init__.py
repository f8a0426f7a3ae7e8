"""Checkpoint / resume of the passes of :func:`daskbatch.describe`.

- :mod:`~daskbatch.engine.checkpoint.run`: a pass through a checkpoint directory;
- :mod:`~daskbatch.engine.checkpoint.manifest`: what the directory belongs to, and its run logs;
- :mod:`~daskbatch.engine.checkpoint.fingerprint`: what identifies the data and settings;
- :mod:`~daskbatch.engine.checkpoint.files`: one checksummed file of states (records of
  :mod:`daskbatch.io.state_codec`, the codec saved summaries use too);
- :mod:`~daskbatch.engine.checkpoint.lock`: one run at a time.
"""
