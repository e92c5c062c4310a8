"""``python -m hubstore.cli``."""

from hubstore.cli import main

main()
