"""Helpers shared by tests of several layers (fixtures live in tests/conftest.py)."""
