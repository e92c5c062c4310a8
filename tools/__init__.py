"""Helpers of the project's own tooling (not part of the hubstore package)."""
