import Foundation
import KeyManager
import Sync

// The JSON objects of DESIGN.md's CLI contract, built in one place so every command prints the same shapes.
// Absent optional values are `null`, never missing; timestamps are ISO 8601 UTC (`Timestamp`).

extension JSONValue {
    /// A string, or `null` when absent.
    static func optional(_ text: String?) -> JSONValue { text.map(JSONValue.string) ?? .null }

    /// A timestamp as keymgr's ISO 8601 UTC text, or `null` when absent.
    static func timestamp(_ date: Date?) -> JSONValue { date.map { .string(ISOTime.string(from: $0)) } ?? .null }

    /// An integer.
    static func integer(_ value: Int) -> JSONValue { .int(Int64(value)) }
}

extension UserKey {
    /// `{"kid","userId","username","authType","status","serverState","createdAt","lastUsedAt","deviceName"}`.
    var json: [String: JSONValue] {
        [
            "kid": .string(kid),
            "userId": .string(userId),
            "username": .optional(username),
            "authType": .string(authType.rawValue),
            "status": .string(status.rawValue),
            "serverState": .string(serverState.rawValue),
            "createdAt": .timestamp(createdAt),
            "lastUsedAt": .timestamp(lastUsedAt),
            "deviceName": .optional(deviceName),
        ]
    }
}

extension JWK {
    /// The public JWK's members; absent members are left out, as JWK (RFC 7517) expects.
    var json: JSONValue {
        var members: [String: JSONValue] = [:]
        for (name, value) in [("kty", kty), ("crv", crv), ("x", x), ("y", y), ("use", use), ("alg", alg), ("kid", kid)] {
            if let value { members[name] = .string(value) }
        }
        return .object(members)
    }
}

extension BindResult {
    /// The key object plus `"jwk"` and, when a challenge was signed, `"jws"` (bind and rebind).
    var json: JSONValue {
        var object = key.json
        object["jwk"] = jwk.json
        if let jws { object["jws"] = .string(jws) }
        return .object(object)
    }
}

extension StoreStatus {
    /// `{"deviceId","deviceName","schemaVersion","users","keys","lastSync"}` (status and init).
    var json: JSONValue {
        .object([
            "deviceId": .string(deviceId),
            "deviceName": .string(deviceName),
            "schemaVersion": .integer(schemaVersion),
            "users": .integer(users),
            "keys": .integer(keys),
            "lastSync": .timestamp(lastSync),
        ])
    }
}

extension UserSummary {
    /// `{"userId","username","keys","createdAt"}`; `keys` counts the user's active keys.
    var json: JSONValue {
        .object([
            "userId": .string(userId),
            "username": .optional(username),
            "keys": .integer(activeKeys),
            "createdAt": .timestamp(createdAt),
        ])
    }
}

extension AuditEntry {
    /// `{"seq","at","event","userId","kid","actor","details","hash","prevHash"}`.
    var json: JSONValue {
        .object([
            "seq": .int(seq),
            "at": .string(at),
            "event": .string(event),
            "userId": .optional(userId),
            "kid": .optional(kid),
            "actor": .string(actor),
            "details": details,
            "hash": .string(hash),
            "prevHash": .string(prevHash),
        ])
    }
}

extension AuditVerification {
    /// `{"intact","checked","firstBadSeq","reason"}`; the last two are `null` when the chain holds.
    var json: JSONValue {
        .object([
            "intact": .bool(isIntact),
            "checked": .integer(checked),
            "firstBadSeq": firstBad.map { .int($0.seq) } ?? .null,
            "reason": .optional(firstBad?.reason),
        ])
    }
}

/// How people see values in tables: seconds precision, UTC, `-` for nothing.
enum HumanText {
    static func time(_ date: Date?) -> String {
        guard let date else { return "-" }
        return String(ISOTime.string(from: date).prefix(19)) + "Z"
    }

    static func text(_ value: String?) -> String {
        guard let value, !value.isEmpty else { return "-" }
        return value
    }
}

extension ServerSettings {
    /// `{"name","dialect","baseUrl","realmPath","credentialFile","credentialHeader","tokenEndpoint",
    /// "registrationEndpoint","revocationEndpoint","deviceAuthorizationEndpoint","tokenBinding","updatedAt"}`:
    /// where the credential is read from, never the credential.
    var json: JSONValue {
        .object([
            "name": .string(name),
            "dialect": .string(dialect.rawValue),
            "baseUrl": .string(baseURL.absoluteString),
            "realmPath": .string(realmPath),
            "credentialFile": .optional(credentialFile),
            "credentialHeader": .string(credentialHeader),
            "tokenEndpoint": .optional(tokenEndpoint?.absoluteString),
            "registrationEndpoint": .optional(registrationEndpoint?.absoluteString),
            "revocationEndpoint": .optional(revocationEndpoint?.absoluteString),
            "deviceAuthorizationEndpoint": .optional(deviceAuthorizationEndpoint?.absoluteString),
            "tokenBinding": .string(tokenBinding.rawValue),
            "updatedAt": .timestamp(updatedAt),
        ])
    }
}

extension SyncReport {
    /// `{"dryRun","users","inSync","registered","revoked","serverDeleted","orphans","errors":[{"userId","code","message"}],"writes"}`;
    /// the four lists hold kids.
    var json: JSONValue {
        .object([
            "dryRun": .bool(dryRun),
            "users": .integer(users),
            "inSync": .integer(inSync),
            "registered": .array(registered.map(JSONValue.string)),
            "revoked": .array(revoked.map(JSONValue.string)),
            "serverDeleted": .array(serverDeleted.map(JSONValue.string)),
            "orphans": .array(orphans.map(JSONValue.string)),
            "errors": .array(errors.map {
                .object(["userId": .string($0.userId), "code": .string($0.code), "message": .string($0.message)])
            }),
            "writes": .integer(writes),
        ])
    }
}
