"""Migrations: the revisions both ways, adopting the reference's files, the reference reading
hubstore's, and an application's own Alembic.
"""
