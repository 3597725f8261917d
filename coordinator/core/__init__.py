"""The pure core: group state machine, offsets, timers, topic hashes, records and their codec.
No asyncio, no sockets, no clock: time is an argument. Imports nothing above it."""
