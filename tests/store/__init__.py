"""Store calls: agents, messages, human requests, dead letters, reflexion, pipelines,
figures, and the values they take and return.
"""
