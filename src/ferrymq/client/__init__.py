"""The Python SDK: producers, consumers and admin, asyncio first with a synchronous facade."""
