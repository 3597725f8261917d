"""The standalone broker mimic, pure: Metadata, FindCoordinator, empty Fetch/ListOffsets, the
refused Produce, topic admin, and the topic-change signal to clients (serve.topic_service
is its asyncio side)."""
