"""The durable security state: ACLs and SCRAM credentials as records of the coordinator's log
(issue 22; the decisions themselves are coordinator.security's).

`SecurityState` holds the authorizer's ACLs and the users' credentials. It changes only by
records (records.AclKey, records.ScramCredentialKey), live through `apply` and at start-up
through the same `apply` from the log's replay, so a restart rebuilds exactly what was
acknowledged (the persist-then-reply rule of the group records: the admin API's answer leaves
once its records are durable).

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from coordinator.core.records import (
    AclKey,
    AclValue,
    Record,
    ScramCredentialKey,
    ScramCredentialValue,
)
from coordinator.security.acl import AclBinding, Authorizer, Operation, PatternType, Permission
from coordinator.security.acl import ResourceType as RT
from coordinator.security.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    Credentials,
    ScramCredential,
)

# KIP-554's ScramMechanism codes, as AlterUserScramCredentials and DescribeUserScramCredentials
# carry them.
MECHANISM_CODES: Final = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES: Final = {code: name for name, code in MECHANISM_CODES.items()}


def acl_key(acl: AclBinding) -> AclKey:
    return AclKey(
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission),
    )


def acl_of(key: AclKey) -> AclBinding:
    return AclBinding(
        RT(key.resource_type),
        key.resource_name,
        PatternType(key.pattern_type),
        key.principal,
        key.host,
        Operation(key.operation),
        Permission(key.permission),
    )


def acl_record(acl: AclBinding, present: bool) -> Record:
    return Record(acl_key(acl), AclValue() if present else None)


def credential_record(user: str, mechanism: str, credential: ScramCredential | None) -> Record:
    key = ScramCredentialKey(user, MECHANISM_CODES[mechanism])
    if credential is None:
        return Record(key, None)
    value = ScramCredentialValue(
        credential.salt, credential.stored_key, credential.server_key, credential.iterations
    )
    return Record(key, value)


class SecurityState:
    def __init__(self) -> None:
        self.authorizer = Authorizer()
        self.credentials = Credentials()

    def apply(self, record: Record) -> None:
        """One durable record (replayed, or just written)."""
        key = record.key
        if isinstance(key, AclKey):
            acl = acl_of(key)
            if record.value is None:
                self.authorizer.remove(acl)
            else:
                self.authorizer.add(acl)
            return
        if not isinstance(key, ScramCredentialKey):
            raise TypeError(f"not a security record: {key!r}")
        mechanism = MECHANISM_NAMES.get(key.mechanism)
        if mechanism is None:
            return  # a mechanism this version does not know: keep nothing of it
        value = record.value
        if value is None:
            self.credentials.delete(key.user, mechanism)
            return
        assert isinstance(value, ScramCredentialValue)
        self.credentials.put(
            key.user,
            ScramCredential(
                mechanism, value.salt, value.stored_key, value.server_key, value.iterations
            ),
        )
