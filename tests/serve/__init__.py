"""The asyncio shell over real sockets: server, runtime, listener, lifecycle, metrics, settings,
layers."""
