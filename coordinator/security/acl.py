"""Kafka's ACL model and its authorizer decision, pure (issue 22).

The model is Kafka's (`org.apache.kafka.common.acl`, `org.apache.kafka.common.resource`), with
its wire codes, so CreateAcls/DescribeAcls/DeleteAcls requests map onto it one to one:
- An ACL binds a resource pattern (type, name, LITERAL or PREFIXED) to an entry (principal such
  as `User:alice`, host, operation, ALLOW or DENY).
- `authorize(principal, host, operation, resource)` decides as Kafka's StandardAuthorizer does
  (`StandardAuthorizerData.authorize`, KIP-801):
  1. a super user is allowed everything;
  2. the ACLs that apply are those whose pattern matches the resource (LITERAL: the same name,
     or the wildcard `*`; PREFIXED: a prefix of the name), whose principal is the caller's or
     `User:*`, and whose host is the caller's or `*`;
  3. any DENY among them for the operation (or ALL) denies;
  4. otherwise any ALLOW for the operation (or ALL) allows; an ALLOW of READ, WRITE, DELETE or
     ALTER also allows DESCRIBE, and ALTER_CONFIGS allows DESCRIBE_CONFIGS (Kafka's implied
     operations);
  5. otherwise, when no ACL at all matches the resource (whoever it names), the answer is
     `allow_everyone_if_no_acl_found` (off by default, as Kafka's
     `allow.everyone.if.no.acl.found`); else denied.
- Filters (DescribeAcls, DeleteAcls) use Kafka's ANY and MATCH: a MATCH filter on name N selects
  every pattern that would apply to a resource named N (literal N, literal `*`, prefixes of N).

Pure: no I/O. The enforcement per API lives with the handlers; this answers yes or no.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"  # a LITERAL resource name, a host: matches all
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name, as Kafka names it

# An ALLOW of any of these operations also allows the key (Kafka's AclEntry implied operations).
_IMPLIED_BY = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class Resource:
    """A concrete resource a request touches."""

    resource_type: ResourceType
    name: str


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL, as CreateAcls creates it and DescribeAcls lists it."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def problem(self) -> str | None:
        """Why CreateAcls must refuse this binding (Kafka's INVALID_REQUEST message), or None."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            return "the resource type must be concrete"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "the pattern type must be LITERAL or PREFIXED"
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            return "the operation must be concrete"
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return "the permission must be ALLOW or DENY"
        if not self.resource_name:
            return "the resource name must not be empty"
        if ":" not in self.principal:
            return f"the principal {self.principal!r} is not TYPE:NAME"
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME!r}"
        return None

    def applies_to(self, resource: Resource) -> bool:
        if self.resource_type != resource.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return resource.name.startswith(self.resource_name)
        return self.resource_name in (resource.name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls/DeleteAcls: None (a null on the wire) and the ANY codes match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation is not Operation.ANY and acl.operation != self.operation:
            return False
        return self.permission is Permission.ANY or acl.permission == self.permission

    def _pattern_matches(self, acl: AclBinding) -> bool:
        pattern = self.pattern_type
        if pattern is PatternType.MATCH:
            if self.resource_name is None:
                return True
            probe = Resource(acl.resource_type, self.resource_name)
            return acl.applies_to(probe)
        if pattern is not PatternType.ANY and acl.pattern_type != pattern:
            return False
        return self.resource_name is None or acl.resource_name == self.resource_name


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the authenticated principal and the client's address."""

    principal: str  # e.g. "User:alice"; "User:ANONYMOUS" before/without authentication
    host: str


ANONYMOUS = "User:ANONYMOUS"


class Authorizer:
    """The ACLs in force and the decision over them. Mutated only through `add`/`remove`, which
    the records of CreateAcls/DeleteAcls drive (persisted like the group records)."""

    def __init__(
        self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourceType, set[AclBinding]] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self._acls.values())

    def acls(self) -> list[AclBinding]:
        return sorted((a for s in self._acls.values() for a in s), key=_order)

    def add(self, acl: AclBinding) -> bool:
        """True if it is new."""
        bucket = self._acls.setdefault(acl.resource_type, set())
        if acl in bucket:
            return False
        bucket.add(acl)
        return True

    def remove(self, acl: AclBinding) -> bool:
        bucket = self._acls.get(acl.resource_type)
        if bucket is None or acl not in bucket:
            return False
        bucket.discard(acl)
        return True

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [a for a in self.acls() if acl_filter.matches(a)]

    def authorize(self, caller: Caller, operation: Operation, resource: Resource) -> bool:
        if caller.principal in self.super_users:
            return True
        applicable = [
            a for a in self._acls.get(resource.resource_type, ()) if a.applies_to(resource)
        ]
        if not applicable:
            return self.allow_everyone_if_no_acl_found
        mine = [
            a
            for a in applicable
            if a.principal in (caller.principal, WILDCARD_PRINCIPAL)
            and a.host in (caller.host, WILDCARD)
        ]
        if any(
            a.permission is Permission.DENY and a.operation in (operation, Operation.ALL)
            for a in mine
        ):
            return False
        allowed_by = _IMPLIED_BY.get(operation, frozenset({operation}))
        return any(
            a.permission is Permission.ALLOW
            and (a.operation is Operation.ALL or a.operation in allowed_by)
            for a in mine
        )


def _order(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (
        acl.resource_type,
        acl.resource_name,
        acl.pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission,
    )


def admits_fleet_member(
    principal: str | None, own_principal: str, host: str, authorizer: Authorizer | None
) -> bool:
    """Whether a connection on a sidecar fleet's listener is another member's, whose forwarded
    requests are not judged again (coordinator.sidecar.fleet_tls). Kafka's inter-broker rule:
    the peer's certificate names this member's own principal (every member presents the same
    certificate), or, with an authorizer, it may CLUSTER_ACTION the cluster (a super user may).
    Without a verified certificate (`principal` None): never."""
    if principal is None:
        return False
    if principal == own_principal:
        return True
    if authorizer is None:
        return False
    cluster = Resource(ResourceType.CLUSTER, CLUSTER_NAME)
    return authorizer.authorize(Caller(principal, host), Operation.CLUSTER_ACTION, cluster)
