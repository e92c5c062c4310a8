"""Waiting across processes: wake-ups, feeds, the async store."""
