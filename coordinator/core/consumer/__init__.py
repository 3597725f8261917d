"""The KIP-848 consumer group protocol's pure core (issue 23): ConsumerGroupHeartbeat's state
machine, the server-side assignors, the consumer-group records and their replay.

Modules, bottom up: `records` (what is persisted, Kafka's record types 3-8 and 16), `model` (the
group and its members), `replay` (records -> group), `reconcile` (one member toward its target),
`assignors` (`uniform`, `range`), `regex` (RE2-compatible subscriptions), `timers`, `messages`
(request, response, results, events), `coordinator` (the heartbeat, leave, fencing, timers),
`classic` (classic members inside a consumer group: the online upgrade/downgrade).
"""

from coordinator.core.consumer.coordinator import ConsumerGroupCoordinator
from coordinator.core.consumer.messages import (
    ConsumerGroupConfig,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeat,
    ConsumerResult,
    HeartbeatResponse,
)
from coordinator.core.consumer.model import (
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
)
from coordinator.core.consumer.records import RECORD_TYPES, ConsumerGroupRecord, TopicPartitions
from coordinator.core.consumer.replay import replay

__all__ = [
    "RECORD_TYPES",
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupCoordinator",
    "ConsumerGroupDescription",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupMember",
    "ConsumerGroupRecord",
    "ConsumerGroupState",
    "ConsumerResult",
    "HeartbeatResponse",
    "MemberState",
    "TopicPartitions",
    "replay",
]
