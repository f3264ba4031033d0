"""Deterministic, seeded simulation of the journal's write protocol.

See docs/TESTING.md.
"""
