"""``python -m daskbatch ...``: the same commands as the ``daskbatch`` script."""

from daskbatch.cli import main

main(prog_name="daskbatch")
