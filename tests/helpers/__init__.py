"""Helpers shared by the test modules (data builders, repositories, waiting on a condition).

Test modules import from here (``from helpers.x import y``), never from one another.
"""
