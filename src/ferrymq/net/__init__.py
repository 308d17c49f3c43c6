"""asyncio remoting transport: servers, clients, request/response matching. Imports only ferrymq.protocol."""
