"""Assign jobs: the rule table, claims, batches, rescue, cancel, results, quotas, unique and
periodic jobs.
"""
