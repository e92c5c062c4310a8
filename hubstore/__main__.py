"""``python -m hubstore``: the ``hubstore`` command line."""

from hubstore.cli import main

main()
