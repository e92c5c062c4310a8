"""Units of work: nesting, joining the application's transaction, read-only and one-statement
units, how statements run.
"""
