"""The assign jobs' wing."""
