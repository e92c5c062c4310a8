"""The project itself: docs and their examples, the README, layers, types, import cost, the
wheel, the benchmark scripts, the pytest plugin.
"""
