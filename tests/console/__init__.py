"""The web console (its browser tests drive Debian's chromium)."""
