"""Kafka's authorizer decision (coordinator.security.acl), table-driven.

Each row is a rule of Kafka's StandardAuthorizer (StandardAuthorizerData.findResult and
MatchingRuleBuilder.build in apache/kafka's metadata module), checked with the ACLs it needs and
nothing else."""

from __future__ import annotations

import pytest

from coordinator.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Authorizer,
    Caller,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    admits_fleet_member,
)

G, T = ResourceType.GROUP, ResourceType.TOPIC
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation
ALICE = Caller("User:alice", "10.0.0.1")


def acl(
    rtype: ResourceType,
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = LIT,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


CASES = [
    # (why, acls, caller, operation, resource, allowed)
    ("no ACL at all: denied by default", [], ALICE, Op.READ, (G, "g"), False),
    ("a literal ALLOW for the operation", [acl(G, "g", Op.READ)], ALICE, Op.READ, (G, "g"), True),
    ("another group's ACL does not apply", [acl(G, "h", Op.READ)], ALICE, Op.READ, (G, "g"), False),
    ("a literal name is not a prefix", [acl(G, "g", Op.READ)], ALICE, Op.READ, (G, "gx"), False),
    ("the literal wildcard name", [acl(G, "*", Op.READ)], ALICE, Op.READ, (G, "any"), True),
    ("a prefixed pattern", [acl(G, "team-", Op.READ, pattern=PRE)], ALICE, Op.READ,
     (G, "team-a"), True),
    ("a prefix that does not match", [acl(G, "team-", Op.READ, pattern=PRE)], ALICE, Op.READ,
     (G, "tea"), False),
    ("another resource type", [acl(T, "g", Op.READ)], ALICE, Op.READ, (G, "g"), False),
    ("another principal", [acl(G, "g", Op.READ, principal="User:bob")], ALICE, Op.READ,
     (G, "g"), False),
    ("the wildcard principal", [acl(G, "g", Op.READ, principal="User:*")], ALICE, Op.READ,
     (G, "g"), True),
    ("another host", [acl(G, "g", Op.READ, host="10.9.9.9")], ALICE, Op.READ, (G, "g"), False),
    ("the caller's host", [acl(G, "g", Op.READ, host="10.0.0.1")], ALICE, Op.READ, (G, "g"), True),
    ("ALL allows every operation", [acl(G, "g", Op.ALL)], ALICE, Op.DELETE, (G, "g"), True),
    ("READ implies DESCRIBE", [acl(G, "g", Op.READ)], ALICE, Op.DESCRIBE, (G, "g"), True),
    ("DELETE implies DESCRIBE", [acl(G, "g", Op.DELETE)], ALICE, Op.DESCRIBE, (G, "g"), True),
    ("WRITE implies DESCRIBE", [acl(T, "t", Op.WRITE)], ALICE, Op.DESCRIBE, (T, "t"), True),
    ("ALTER implies DESCRIBE", [acl(T, "t", Op.ALTER)], ALICE, Op.DESCRIBE, (T, "t"), True),
    ("CREATE does not imply DESCRIBE", [acl(T, "t", Op.CREATE)], ALICE, Op.DESCRIBE, (T, "t"),
     False),
    ("DESCRIBE does not imply READ", [acl(G, "g", Op.DESCRIBE)], ALICE, Op.READ, (G, "g"), False),
    ("ALTER_CONFIGS implies DESCRIBE_CONFIGS", [acl(T, "t", Op.ALTER_CONFIGS)], ALICE,
     Op.DESCRIBE_CONFIGS, (T, "t"), True),
    ("DENY overrides ALLOW", [acl(G, "g", Op.READ), acl(G, "*", Op.READ, DENY)], ALICE, Op.READ,
     (G, "g"), False),
    ("a DENY of ALL denies everything", [acl(G, "g", Op.READ), acl(G, "g", Op.ALL, DENY)], ALICE,
     Op.READ, (G, "g"), False),
    ("a DENY of READ does not deny DESCRIBE", [acl(G, "g", Op.READ), acl(G, "g", Op.READ, DENY)],
     ALICE, Op.DESCRIBE, (G, "g"), True),
    ("a DENY for someone else does not apply",
     [acl(G, "g", Op.READ), acl(G, "g", Op.READ, DENY, principal="User:bob")], ALICE, Op.READ,
     (G, "g"), True),
    ("a DENY through a prefix", [acl(G, "g", Op.READ), acl(G, "g", Op.READ, DENY, pattern=PRE)],
     ALICE, Op.READ, (G, "g"), False),
    ("the cluster resource", [acl(ResourceType.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)], ALICE,
     Op.DESCRIBE, (ResourceType.CLUSTER, CLUSTER_NAME), True),
]


@pytest.mark.parametrize(("why", "acls", "caller", "op", "resource", "allowed"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_the_decision(why, acls, caller, op, resource, allowed) -> None:  # type: ignore[no-untyped-def]
    authorizer = Authorizer()
    for a in acls:
        assert a.problem() is None, a
        authorizer.add(a)
    assert authorizer.authorize(caller, op, Resource(*resource)) is allowed, why


def test_allow_everyone_applies_only_where_the_resource_has_no_acl_for_anyone() -> None:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    assert authorizer.authorize(ALICE, Op.READ, Resource(G, "free"))
    authorizer.add(acl(G, "kept", Op.READ, principal="User:bob"))  # an ACL, but not alice's
    assert not authorizer.authorize(ALICE, Op.READ, Resource(G, "kept"))
    assert authorizer.authorize(ALICE, Op.READ, Resource(G, "free"))


def test_super_users_pass_whatever_the_acls_say() -> None:
    authorizer = Authorizer(super_users=["User:admin"])
    authorizer.add(acl(G, "*", Op.ALL, DENY, principal="User:*"))
    assert authorizer.authorize(Caller("User:admin", "h"), Op.DELETE, Resource(G, "g"))
    assert not authorizer.authorize(ALICE, Op.DELETE, Resource(G, "g"))


def test_add_and_remove_are_idempotent() -> None:
    authorizer = Authorizer()
    a = acl(G, "g", Op.READ)
    assert authorizer.add(a) and not authorizer.add(a) and len(authorizer) == 1
    assert authorizer.remove(a) and not authorizer.remove(a) and len(authorizer) == 0


@pytest.mark.parametrize(
    ("binding", "problem"),
    [
        (AclBinding(ResourceType.ANY, "g", LIT, "User:a", "*", Op.READ, ALLOW), "resource type"),
        (AclBinding(G, "g", PatternType.MATCH, "User:a", "*", Op.READ, ALLOW), "pattern type"),
        (AclBinding(G, "g", LIT, "User:a", "*", Op.ANY, ALLOW), "operation"),
        (AclBinding(G, "g", LIT, "User:a", "*", Op.READ, Permission.ANY), "permission"),
        (AclBinding(G, "", LIT, "User:a", "*", Op.READ, ALLOW), "name"),
        (AclBinding(G, "g", LIT, "alice", "*", Op.READ, ALLOW), "principal"),
        (AclBinding(ResourceType.CLUSTER, "c", LIT, "User:a", "*", Op.ALTER, ALLOW), "cluster"),
    ],
)
def test_create_refuses_what_kafka_refuses(binding: AclBinding, problem: str) -> None:
    assert problem in (binding.problem() or "")


def test_create_refusals_say_what_is_wrong() -> None:
    """The messages CreateAcls answers with (INVALID_REQUEST's error_message), word for word."""
    def problem(**changes: object) -> str | None:
        fields = {"resource_type": G, "resource_name": "g", "pattern_type": LIT,
                  "principal": "User:a", "host": "*", "operation": Op.READ, "permission": ALLOW}
        return AclBinding(**{**fields, **changes}).problem()  # type: ignore[arg-type]

    assert problem() is None
    assert problem(resource_type=ResourceType.UNKNOWN) == "the resource type must be concrete"
    assert problem(pattern_type=PatternType.ANY) == "the pattern type must be LITERAL or PREFIXED"
    assert problem(operation=Op.UNKNOWN) == "the operation must be concrete"
    assert problem(permission=Permission.UNKNOWN) == "the permission must be ALLOW or DENY"
    assert problem(resource_name="") == "the resource name must not be empty"
    assert problem(principal="alice") == "the principal 'alice' is not TYPE:NAME"
    assert problem(resource_type=ResourceType.CLUSTER) == "the cluster resource is named " \
        "'kafka-cluster'"


def test_a_binding_applies_only_to_its_own_resource_type() -> None:
    assert acl(G, "g", Op.READ).applies_to(Resource(G, "g"))
    assert not acl(G, "g", Op.READ).applies_to(Resource(T, "g"))
    assert not acl(G, "*", Op.READ).applies_to(Resource(T, "g"))
    assert not acl(G, "g", Op.READ, pattern=PRE).applies_to(Resource(T, "gx"))


def test_filters_any_literal_prefixed_and_match() -> None:
    authorizer = Authorizer()
    literal = acl(T, "orders", Op.READ)
    wildcard = acl(T, "*", Op.DESCRIBE)
    prefixed = acl(T, "ord", Op.WRITE, pattern=PRE)
    other = acl(T, "payments", Op.READ, principal="User:bob", host="10.1.1.1")
    group = acl(G, "orders", Op.READ, DENY)
    for a in (literal, wildcard, prefixed, other, group):
        authorizer.add(a)

    def names(f: AclFilter) -> set[AclBinding]:
        return set(authorizer.matching(f))

    assert names(AclFilter()) == {literal, wildcard, prefixed, other, group}
    assert names(AclFilter(resource_type=T, resource_name="orders")) == {literal}
    assert names(AclFilter(resource_type=T, pattern_type=PRE)) == {prefixed}
    # MATCH without a name: everything, as ANY
    assert names(AclFilter(pattern_type=PatternType.MATCH)) == {literal, wildcard, prefixed, other,
                                                                group}  # fmt: skip
    # MATCH: every pattern that applies to a topic named "orders"
    assert names(AclFilter(T, "orders", PatternType.MATCH)) == {literal, wildcard, prefixed}
    assert names(AclFilter(principal="User:bob")) == {other}
    assert names(AclFilter(host="10.1.1.1")) == {other}
    assert names(AclFilter(operation=Op.READ)) == {literal, other, group}
    assert names(AclFilter(permission=DENY)) == {group}


# -- the fleet listener's rule (coordinator.sidecar.fleet_tls; its sockets: test_fleet_mtls.py) ---

OWN = "User:CN=localhost"  # every member presents the same certificate
MALLORY = "User:CN=mallory,O=groupcoord"


def cluster_action(principal: str, permission: Permission = ALLOW) -> AclBinding:
    return AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, LIT, principal, "*",
                      Op.CLUSTER_ACTION, permission)  # fmt: skip


def test_only_the_own_principal_or_cluster_action_is_a_fleet_member() -> None:
    assert admits_fleet_member(OWN, OWN, "10.0.0.1", None)
    assert not admits_fleet_member(MALLORY, OWN, "10.0.0.1", None)  # no authorizer: own only
    assert not admits_fleet_member(None, OWN, "10.0.0.1", Authorizer(super_users=[OWN]))
    acls = Authorizer(super_users=["User:admin"])
    assert not admits_fleet_member(MALLORY, OWN, "10.0.0.1", acls)
    assert admits_fleet_member("User:admin", OWN, "10.0.0.1", acls)  # a super user may
    acls.add(cluster_action(MALLORY))
    assert admits_fleet_member(MALLORY, OWN, "10.0.0.1", acls)
    acls.add(cluster_action("User:*", DENY))  # a DENY wins
    assert not admits_fleet_member(MALLORY, OWN, "10.0.0.1", acls)
    assert admits_fleet_member(OWN, OWN, "10.0.0.1", acls)  # but not over the member itself


def test_cluster_action_is_judged_for_the_callers_host_on_the_cluster_only() -> None:
    acls = Authorizer()
    acls.add(AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, LIT, MALLORY, "10.0.0.9",
                        Op.CLUSTER_ACTION, ALLOW))  # fmt: skip
    acls.add(AclBinding(G, "*", LIT, "User:bob", "*", Op.ALL, ALLOW))  # a group's, not the cluster
    acls.add(AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, LIT, "User:carol", "*", Op.DESCRIBE,
                        ALLOW))  # fmt: skip
    assert admits_fleet_member(MALLORY, OWN, "10.0.0.9", acls)
    assert not admits_fleet_member(MALLORY, OWN, "10.0.0.1", acls)  # another host
    assert not admits_fleet_member("User:bob", OWN, "10.0.0.9", acls)
    assert not admits_fleet_member("User:carol", OWN, "10.0.0.9", acls)  # not CLUSTER_ACTION
