"""Every setting of groupcoord's own Kafka clients toward the upstream cluster, in one place.

The fleet's producer, readers, admin client and membership consumer (coordinator.sidecar.fleet,
coordinator.sidecar.state_topic) are aiokafka clients built from `client_options(settings)`.
Upstream security (TLS, SASL: issue 22) is added here and nowhere else.
"""

from __future__ import annotations

from typing import Any

CLIENT_ID = "groupcoord-fleet"


def client_options(bootstrap: str, request_timeout_ms: int = 10_000) -> dict[str, Any]:
    """Keyword arguments common to AIOKafkaProducer, AIOKafkaConsumer and AIOKafkaAdminClient."""
    return {
        "bootstrap_servers": bootstrap,
        "client_id": CLIENT_ID,
        "request_timeout_ms": request_timeout_ms,
        "retry_backoff_ms": 100,
        "metadata_max_age_ms": 30_000,
    }
