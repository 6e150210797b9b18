"""Executing compiled plans: the asyncio driver runtime and its backends."""
