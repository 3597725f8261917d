"""ShareFetch / ShareAcknowledge in standalone mode: refused with an error code, not a closed
connection.

Share groups (KIP-932) need records, and a standalone groupcoord has none: only a sidecar
(`--upstream`) reads them from its upstream cluster (coordinator.sidecar.share_fetch). Standalone,
ApiVersions does not offer the two APIs, so a client that checks it never sends them; one that
sends them anyway gets the answer Apache Kafka gives when share groups are off on a broker
(KafkaApis.handleShareFetchRequest: `!isShareGroupProtocolEnabled` -> UNSUPPORTED_VERSION at the
top level), with a message that says what to do. The Java client turns it into an
UnsupportedVersionException, which it does not retry. Other versions than the ones a sidecar
offers are left to the caller (the connection closes, as for any API version not served).

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import io
import struct
from datetime import timedelta
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import response as ack_v1
from kio.schema.share_acknowledge.v2 import response as ack_v2
from kio.schema.share_fetch.v1 import response as fetch_v1
from kio.schema.share_fetch.v2 import response as fetch_v2
from kio.serial import entity_writer
from kio.static.primitive import i32Timedelta

from protocol.codec import RequestHeader

MESSAGE: Final = "share groups are served in sidecar mode only (groupcoord serve --upstream ...)"
_ZERO: Final = i32Timedelta.parse(timedelta(0))
_MODULES: Final[dict[tuple[int, int], Any]] = {
    (78, 1): fetch_v1,
    (78, 2): fetch_v2,
    (79, 1): ack_v1,
    (79, 2): ack_v2,
}


class Sends(Protocol):
    def send(self, data: bytes) -> None: ...


def refused(conn: Sends, header: RequestHeader) -> bool:
    """Answer a ShareFetch/ShareAcknowledge with the refusal; False for any other request."""
    data = answer(header)
    if data is None:
        return False
    conn.send(data)
    return True


def answer(header: RequestHeader) -> bytes | None:
    """The framed refusal for a ShareFetch/ShareAcknowledge request, or None for anything else."""
    module = _MODULES.get((header.api_key, header.api_version))
    if module is None:
        return None
    fields: dict[str, Any] = {
        "throttle_time": _ZERO,
        "error_code": ErrorCode.unsupported_version,
        "error_message": MESSAGE,
        "responses": (),
        "node_endpoints": (),
    }
    cls = module.ShareFetchResponse if header.api_key == 78 else module.ShareAcknowledgeResponse
    if "acquisition_lock_timeout" in cls.__dataclass_fields__:
        fields["acquisition_lock_timeout"] = _ZERO
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, cls(**fields))
    body = buffer.getvalue()
    # Response header v1 (flexible): correlation id, then no tagged fields.
    return struct.pack(">ii", len(body) + 5, header.correlation_id) + b"\x00" + body
