"""The asyncio shell: listener, server, runtime (Effects -> I/O), journal, lifecycle, HTTP,
metrics, status page, settings and the command line. Uses the core, protocol, storage and broker."""
