"""DescribeConfigs / IncrementalAlterConfigs in a sidecar when a request names GROUP resources
beside topic or broker ones: split in two, the GROUP resources answered here (their configs live
in groupcoord: coordinator.core.handlers.group_configs) and the others forwarded upstream, then
one response with an entry per resource in the request's order (as coordinator.sidecar.forward
splits a batched group request across fleet members and merges the answers).

Invariants: the client gets exactly one response, after both parts answered; the throttle is the
longer one; an upstream answer that cannot be read, or none at all, fails the client connection
as any forwarded request's would. Pure but for the callbacks it is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from coordinator.core.share.config_messages import GROUP_RESOURCE
from coordinator.sidecar.slots import Slot, SlotOwner
from protocol import apis, codec
from protocol.codec import RequestHeader

__all__ = ["Merge", "UpstreamPart", "split"]


def _is_group(resource: Any) -> bool:
    return int(resource.resource_type) == GROUP_RESOURCE


def split(request: Any) -> tuple[Any, Any]:
    """(the request with its GROUP resources only, the request with the others)."""
    groups = tuple(r for r in request.resources if _is_group(r))
    others = tuple(r for r in request.resources if not _is_group(r))
    return (
        dataclasses.replace(request, resources=groups),
        dataclasses.replace(request, resources=others),
    )


class Merge:
    """Collects the two parts' framed responses (`local`, `upstream`) and sends the merged one
    to `answer`; `failed(reason)` when the upstream part has no readable answer."""

    __slots__ = ("_answer", "_failed", "_header", "_parts", "_request")

    def __init__(
        self,
        header: RequestHeader,
        request: Any,
        answer: Callable[[bytes], None],
        failed: Callable[[str], None],
    ) -> None:
        self._header = header
        self._request = request
        self._answer = answer
        self._failed = failed
        self._parts: dict[str, Any] = {}

    def local(self, frame: bytes) -> None:
        self._part("local", frame)

    def upstream(self, frame: bytes | None) -> None:
        if frame is None:
            self._failed("the upstream failed")
            return
        self._part("upstream", frame)

    def _part(self, name: str, frame: bytes) -> None:
        try:
            self._parts[name] = codec.decode_response(self._header, frame)
        except codec.MalformedResponse as exc:
            self._failed(f"undecodable {name} answer to a split config request: {exc}")
            return
        if len(self._parts) == 2:
            try:
                merged = self._merged()
            except codec.MalformedResponse as exc:
                self._failed(f"a split config request's answers do not match it: {exc}")
                return
            self._answer(codec.encode_response(self._header, merged))

    def _merged(self) -> object:
        field = "results" if self._header.api_key == apis.DESCRIBE_CONFIGS else "responses"
        local, upstream = self._parts["local"], self._parts["upstream"]
        from_local = iter(getattr(local, field))
        from_upstream = iter(getattr(upstream, field))
        entries = []
        for resource in self._request.resources:
            source = from_local if _is_group(resource) else from_upstream
            entry = next(source, None)
            if entry is None:  # a part answered fewer entries than it was asked
                raise codec.MalformedResponse(f"no answer for {resource.resource_name!r}")
            entries.append(entry)
        throttle = max(local.throttle_time, upstream.throttle_time)
        return dataclasses.replace(upstream, **{field: tuple(entries)}, throttle_time=throttle)


class UpstreamPart(Slot):
    """The upstream part's place on the link: its answer, read whole, goes to the merge (the
    client's own slot is filled by the merged answer)."""

    __slots__ = ("merge",)

    def __init__(self, conn: SlotOwner, merge: Merge) -> None:
        super().__init__(conn)
        self.merge = merge

    def begin(self) -> Slot | None:
        return None  # decoded whole, never streamed

    def __call__(self, frame: bytes | None) -> None:
        self.merge.upstream(frame)
