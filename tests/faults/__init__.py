"""Seams and faults: hostile and deep inputs, lost and frozen servers, failover, locks held
too long, threads and forks, engines and poolers.
"""
