"""The security admin APIs (issue 22): CreateAcls (30), DescribeAcls (29), DeleteAcls (31),
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), as Kafka answers them, so
kafka-acls.sh, kafka-configs.sh and the admin clients work unchanged.

Each function takes the request and the core's `SecurityState` and returns a `SecurityOutcome`:
the records to persist (the state is changed by applying them, here, at once) and the response
to send once they are durable, or the response for "not durable" (the runtime failed the write:
every entry answered with `error`). Authorization of the request itself (CLUSTER ALTER for the
changes, CLUSTER DESCRIBE for the descriptions) is the caller's, as in Kafka's KafkaApis.

Kafka's answers mirrored:
- Without an authorizer the ACL APIs answer SECURITY_DISABLED ("No Authorizer is configured").
- CreateAcls validates each creation (ResourceType/PatternType/Operation/Permission concrete,
  principal `Type:name`, the cluster resource named `kafka-cluster`): INVALID_REQUEST with
  Kafka's message; valid ones are created even when another one in the request fails.
- DeleteAcls answers, per filter, every ACL it deleted.
- AlterUserScramCredentials: a user twice in one request is DUPLICATE_RESOURCE for all its
  entries; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; fewer than 4096 or more than 16384
  iterations UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist
  RESOURCE_NOT_FOUND; an empty user name UNACCEPTABLE_CREDENTIAL.
- DescribeUserScramCredentials: every user with credentials (null users), or the named ones
  (RESOURCE_NOT_FOUND for a user without any, DUPLICATE_RESOURCE for a name given twice).

Pure: no I/O.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode

from coordinator.broker.answers import make
from coordinator.core.records import Record
from coordinator.core.security import (
    MECHANISM_CODES,
    MECHANISM_NAMES,
    SecurityState,
    acl_record,
    credential_record,
)
from coordinator.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from coordinator.security.sasl import CredentialsError, credential_from_salted
from protocol.apis import response_class

E = ErrorCode
DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
SECURITY_ADMIN_APIS: Final = frozenset(
    {
        DESCRIBE_ACLS,
        CREATE_ACLS,
        DELETE_ACLS,
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        ALTER_USER_SCRAM_CREDENTIALS,
    }
)
MAX_ITERATIONS: Final = 16384  # Kafka's ScramMechanism.maxIterations
_ZERO = timedelta(0)
_NO_AUTHORIZER = "No Authorizer is configured."


@dataclass(slots=True)
class SecurityOutcome:
    records: list[Record] = field(default_factory=list)
    build: Callable[[], Any] = lambda: None
    failed: Callable[[ErrorCode], Any] = lambda error: None


def _nested(cls: type, name: str) -> type:
    return getattr(sys.modules[cls.__module__], name)  # type: ignore[no-any-return]


def handle(
    api_key: int, version: int, request: Any, security: SecurityState, authorizer_on: bool
) -> SecurityOutcome:
    if api_key == CREATE_ACLS:
        return create_acls(version, request, security, authorizer_on)
    if api_key == DESCRIBE_ACLS:
        return describe_acls(version, request, security, authorizer_on)
    if api_key == DELETE_ACLS:
        return delete_acls(version, request, security, authorizer_on)
    if api_key == DESCRIBE_USER_SCRAM_CREDENTIALS:
        return describe_scram(version, request, security)
    if api_key == ALTER_USER_SCRAM_CREDENTIALS:
        return alter_scram(version, request, security)
    raise ValueError(f"not a security admin API: {api_key}")


def denied(api_key: int, version: int, request: Any, error: ErrorCode) -> Any:
    """The response refusing the whole request with `error` (CLUSTER_AUTHORIZATION_FAILED)."""
    cls = response_class(api_key, version)
    if api_key == CREATE_ACLS:
        result_cls = _nested(cls, "AclCreationResult")
        results = tuple(result_cls(error_code=error, error_message=None) for _ in request.creations)
        return make(cls, throttle_time=_ZERO, results=results)
    if api_key == DELETE_ACLS:
        result_cls = _nested(cls, "DeleteAclsFilterResult")
        rows = tuple(
            result_cls(error_code=error, error_message=None, matching_acls=())
            for _ in request.filters
        )
        return make(cls, throttle_time=_ZERO, filter_results=rows)
    if api_key == ALTER_USER_SCRAM_CREDENTIALS:
        result_cls = _nested(cls, "AlterUserScramCredentialsResult")
        users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        return make(
            cls,
            throttle_time=_ZERO,
            results=tuple(
                result_cls(user=u, error_code=error, error_message=None)
                for u in dict.fromkeys(users)
            ),
        )
    return make(  # DescribeAcls, DescribeUserScramCredentials: the top-level error
        cls, throttle_time=_ZERO, error_code=error, error_message=None, resources=(), results=()
    )


# -- ACLs ------------------------------------------------------------------------------------------


def _binding(creation: Any) -> AclBinding | str:
    """The binding a CreateAcls creation asks for, or why it is invalid."""
    try:
        acl = AclBinding(
            ResourceType(creation.resource_type),
            creation.resource_name,
            PatternType(creation.resource_pattern_type),
            creation.principal,
            creation.host,
            Operation(creation.operation),
            Permission(creation.permission_type),
        )
    except ValueError as exc:
        return f"Invalid ACL creation: {exc}"
    problem = acl.problem()
    return acl if problem is None else f"Invalid ACL creation: {problem}"


def create_acls(
    version: int, request: Any, security: SecurityState, authorizer_on: bool
) -> SecurityOutcome:
    cls = response_class(CREATE_ACLS, version)
    result_cls = _nested(cls, "AclCreationResult")
    outcome = SecurityOutcome()
    results: list[tuple[ErrorCode, str | None]] = []
    for creation in request.creations:
        if not authorizer_on:
            results.append((E.security_disabled, _NO_AUTHORIZER))
            continue
        acl = _binding(creation)
        if isinstance(acl, str):
            results.append((E.invalid_request, acl))
            continue
        if security.authorizer.add(acl):
            outcome.records.append(acl_record(acl, present=True))
        results.append((E.none, None))

    def build(errors: list[tuple[ErrorCode, str | None]]) -> Any:
        return make(
            cls,
            throttle_time=_ZERO,
            results=tuple(
                result_cls(error_code=code, error_message=message) for code, message in errors
            ),
        )

    outcome.build = lambda: build(results)
    outcome.failed = lambda error: build([(error, None)] * len(results))
    return outcome


def _filter(f: Any) -> AclFilter | str:
    try:
        return AclFilter(
            ResourceType(f.resource_type_filter),
            f.resource_name_filter,
            PatternType(f.pattern_type_filter),
            f.principal_filter,
            f.host_filter,
            Operation(f.operation),
            Permission(f.permission_type),
        )
    except ValueError as exc:
        return f"Invalid ACL filter: {exc}"


def describe_acls(
    version: int, request: Any, security: SecurityState, authorizer_on: bool
) -> SecurityOutcome:
    cls = response_class(DESCRIBE_ACLS, version)
    resource_cls = _nested(cls, "DescribeAclsResource")
    acl_cls = _nested(cls, "AclDescription")

    def answer(error: ErrorCode, message: str | None, found: list[AclBinding]) -> Any:
        by_resource: dict[tuple[int, str, int], list[Any]] = {}
        for a in found:
            key = (int(a.resource_type), a.resource_name, int(a.pattern_type))
            by_resource.setdefault(key, []).append(
                acl_cls(
                    principal=a.principal,
                    host=a.host,
                    operation=int(a.operation),
                    permission_type=int(a.permission),
                )
            )
        resources = tuple(
            make(resource_cls, resource_type=t, resource_name=n, pattern_type=p, acls=tuple(acls))
            for (t, n, p), acls in by_resource.items()
        )
        return make(
            cls,
            throttle_time=_ZERO,
            error_code=error,
            error_message=message,
            resources=resources,
        )

    outcome = SecurityOutcome()
    if not authorizer_on:
        outcome.build = lambda: answer(E.security_disabled, _NO_AUTHORIZER, [])
        return outcome
    acl_filter = _filter(request)
    if isinstance(acl_filter, str):
        outcome.build = lambda: answer(E.invalid_request, acl_filter, [])
        return outcome
    found = security.authorizer.matching(acl_filter)
    outcome.build = lambda: answer(E.none, None, found)
    return outcome


def delete_acls(
    version: int, request: Any, security: SecurityState, authorizer_on: bool
) -> SecurityOutcome:
    cls = response_class(DELETE_ACLS, version)
    result_cls = _nested(cls, "DeleteAclsFilterResult")
    matching_cls = _nested(cls, "DeleteAclsMatchingAcl")
    outcome = SecurityOutcome()
    results: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
    for f in request.filters:
        if not authorizer_on:
            results.append((E.security_disabled, _NO_AUTHORIZER, []))
            continue
        acl_filter = _filter(f)
        if isinstance(acl_filter, str):
            results.append((E.invalid_request, acl_filter, []))
            continue
        deleted = security.authorizer.matching(acl_filter)
        for acl in deleted:
            security.authorizer.remove(acl)
            outcome.records.append(acl_record(acl, present=False))
        results.append((E.none, None, deleted))

    def matching(acl: AclBinding) -> Any:
        return make(
            matching_cls,
            error_code=E.none,
            error_message=None,
            resource_type=int(acl.resource_type),
            resource_name=acl.resource_name,
            pattern_type=int(acl.pattern_type),
            principal=acl.principal,
            host=acl.host,
            operation=int(acl.operation),
            permission_type=int(acl.permission),
        )

    def build(rows: list[tuple[ErrorCode, str | None, list[AclBinding]]]) -> Any:
        return make(
            cls,
            throttle_time=_ZERO,
            filter_results=tuple(
                result_cls(
                    error_code=code,
                    error_message=message,
                    matching_acls=tuple(matching(a) for a in deleted),
                )
                for code, message, deleted in rows
            ),
        )

    outcome.build = lambda: build(results)
    outcome.failed = lambda error: build([(error, None, [])] * len(results))
    return outcome


# -- SCRAM credentials ---------------------------------------------------------------------------


def describe_scram(version: int, request: Any, security: SecurityState) -> SecurityOutcome:
    cls = response_class(DESCRIBE_USER_SCRAM_CREDENTIALS, version)
    result_cls = _nested(cls, "DescribeUserScramCredentialsResult")
    info_cls = _nested(cls, "CredentialInfo")
    credentials = security.credentials
    if request.users is None:
        names = credentials.users()
        duplicates: set[str] = set()
    else:
        names = [u.name for u in request.users]
        duplicates = {n for n, c in Counter(names).items() if c > 1}
        names = list(dict.fromkeys(names))
    results = []
    for name in names:
        mine = credentials.of(name)
        if name in duplicates:
            code = E.duplicate_resource
            message = f"Cannot describe SCRAM credentials for the same user twice: {name}"
        elif not mine:
            code = E.resource_not_found
            message = f"Attempt to describe a user credential that does not exist: {name}"
        else:
            code, message = E.none, None
        infos = tuple(
            info_cls(mechanism=MECHANISM_CODES[m], iterations=c.iterations)
            for m, c in sorted(mine.items())
        )
        results.append(
            result_cls(
                user=name,
                error_code=code,
                error_message=message,
                credential_infos=infos if code is E.none else (),
            )
        )
    outcome = SecurityOutcome()
    outcome.build = lambda: make(
        cls, throttle_time=_ZERO, error_code=E.none, error_message=None, results=tuple(results)
    )
    return outcome


def alter_scram(version: int, request: Any, security: SecurityState) -> SecurityOutcome:
    cls = response_class(ALTER_USER_SCRAM_CREDENTIALS, version)
    result_cls = _nested(cls, "AlterUserScramCredentialsResult")
    credentials = security.credentials
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    entries = Counter(
        [(d.name, d.mechanism) for d in request.deletions]
        + [(u.name, u.mechanism) for u in request.upsertions]
    )
    duplicated = {name for (name, _), count in entries.items() if count > 1}
    errors: dict[str, tuple[ErrorCode, str | None]] = {}

    def fail(name: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(name, (code, message))

    for name in duplicated:
        fail(name, E.duplicate_resource, "A user credential cannot be altered twice in a request")
    for d in request.deletions:
        mechanism = MECHANISM_NAMES.get(d.mechanism)
        if not d.name:
            fail(d.name, E.unacceptable_credential, "Username must not be empty")
        elif mechanism is None:
            fail(d.name, E.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif credentials.get(d.name, mechanism) is None:
            fail(d.name, E.resource_not_found, "Attempt to delete a credential that does not exist")
    upserts = []
    for u in request.upsertions:
        mechanism = MECHANISM_NAMES.get(u.mechanism)
        if not u.name:
            fail(u.name, E.unacceptable_credential, "Username must not be empty")
        elif mechanism is None:
            fail(u.name, E.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif u.iterations > MAX_ITERATIONS:
            fail(u.name, E.unacceptable_credential, f"Too many iterations: {u.iterations}")
        else:
            try:
                credential = credential_from_salted(
                    mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
                )
            except CredentialsError as exc:
                fail(u.name, E.unacceptable_credential, str(exc))
            else:
                upserts.append((u.name, mechanism, credential))
    outcome = SecurityOutcome()
    for d in request.deletions:
        mechanism = MECHANISM_NAMES.get(d.mechanism)
        if d.name not in errors and mechanism is not None:
            credentials.delete(d.name, mechanism)
            outcome.records.append(credential_record(d.name, mechanism, None))
    for name, mechanism, credential in upserts:
        if name not in errors:
            credentials.put(name, credential)
            outcome.records.append(credential_record(name, mechanism, credential))
    order = list(dict.fromkeys(users))

    def build(pick: Callable[[str], tuple[ErrorCode, str | None]]) -> Any:
        return make(
            cls,
            throttle_time=_ZERO,
            results=tuple(
                result_cls(user=name, error_code=pick(name)[0], error_message=pick(name)[1])
                for name in order
            ),
        )

    outcome.build = lambda: build(lambda name: errors.get(name, (E.none, None)))
    outcome.failed = lambda error: build(lambda name: errors.get(name, (error, None)))
    return outcome
