import Foundation
import Storage

/// Why an administrator revoked a device (`keymgr admin revoke --reason`), recorded in the audit log.
public enum DeviceRevocationReason: String, CaseIterable, Sendable {
    case stolen, lost, left, other
}

/// What an administrator's revocation of one user's device did on the server, and what it asks of this store.
///
/// Built by the Sync layer's `AdminService` after the server's part is done; `recordDeviceRevocation` applies the
/// local part and the audit entry in one transaction.
public struct DeviceRevocation: Sendable, Equatable {
    public var userId: String
    public var reason: DeviceRevocationReason
    /// How the administrator named the device: `--device UUID` or `--device-id ID`, for the audit log.
    public var selector: String
    /// The device id of the revoked bindings, when known.
    public var deviceId: String?
    /// Whether the device is this one.
    public var thisDevice: Bool
    /// Binding uuids deleted on the server by this revocation.
    public var deletedOnServer: [String] = []
    /// Binding uuids the server answered 404 for: already gone.
    public var alreadyGone: [String] = []
    /// Whether the user's OAuth client was deleted at the server (RFC 7592).
    public var clientDeleted = false
    /// This device's keys to revoke (their usable ones); empty when the device is another one.
    public var localKids: [String] = []
    /// Kids a complete listing showed are not (or no longer) on the server: revoked here, they need no server deletion.
    public var goneFromServer: Set<String> = []
    /// The server failed part-way (the message, no secret): what was done is recorded, nothing else changes here.
    public var failure: String?

    public init(userId: String, reason: DeviceRevocationReason, selector: String, deviceId: String?, thisDevice: Bool) {
        self.userId = userId
        self.reason = reason
        self.selector = selector
        self.deviceId = deviceId
        self.thisDevice = thisDevice
    }
}

/// What recording a device revocation changed in this store.
public struct DeviceRevocationOutcome: Sendable, Equatable {
    /// Kids revoked here now (key material destroyed).
    public var revokedHere: [String] = []
    /// Token sets (with their DPoP keys) wiped.
    public var tokenSetsWiped = 0
    /// Client registrations wiped.
    public var registrationsWiped = 0

    public init() {}
}

extension KeyManager {
    /// The audit events of administrators' commands.
    static let adminAuditEvents: Set<String> = ["admin.devicesListed", "admin.staleListed", "admin.deviceRevoked"]

    /// Applies the local part of an administrator's device revocation and audits it, in one transaction.
    ///
    /// When the device is this one, the usable keys in `localKids` are revoked (key material and PINs destroyed;
    /// those in `goneFromServer` recorded as deleted there) and the user's tokens, DPoP keys and client
    /// registrations are wiped. The `admin.deviceRevoked` entry names the acting OS user, the reason and what changed;
    /// it is written even when nothing changed, so the log shows every attempt.
    @discardableResult
    public func recordDeviceRevocation(_ revocation: DeviceRevocation) throws -> DeviceRevocationOutcome {
        try authorize(userId: revocation.userId)
        let at = now()
        let reason = "revoked by an administrator (\(revocation.reason.rawValue))"
        let outcome = try write { writer in
            var outcome = DeviceRevocationOutcome()
            if revocation.failure == nil && revocation.thisDevice {
                // The server's user is the same whether a local identity is `bob` or `id=bob,ou=user,…`.
                let segment = { (id: String) in UniversalId.idValue(id) ?? id }
                for kid in revocation.localKids {
                    guard var key = try writer.key(kid: kid), segment(key.userId) == segment(revocation.userId),
                          key.status == .active || key.status == .locked else { continue }
                    destroy(&key, status: .revoked, reason: reason, at: at)
                    if revocation.goneFromServer.contains(kid) { key.serverState = .deleted }
                    try writer.update(key)
                    try writer.deleteAppPIN(kid: kid)
                    try writer.appendAudit(auditEvent("key.revoked", userId: key.userId, kid: kid, details: [
                        "reason": .string(reason), "by": .string("admin revoke"),
                    ]))
                    outcome.revokedHere.append(kid)
                }
                outcome.tokenSetsWiped = try writer.deleteTokenSets(userId: revocation.userId)
                outcome.registrationsWiped = try writer.deleteRegistrations(userId: revocation.userId)
                if outcome.tokenSetsWiped + outcome.registrationsWiped > 0 {
                    try writer.appendAudit(auditEvent("credentials.wiped", userId: revocation.userId, details: [
                        "tokenSets": .int(Int64(outcome.tokenSetsWiped)),
                        "registrations": .int(Int64(outcome.registrationsWiped)), "reason": .string(reason),
                    ]))
                }
            }
            let changed = !revocation.deletedOnServer.isEmpty || revocation.clientDeleted || !outcome.revokedHere.isEmpty
                || outcome.tokenSetsWiped + outcome.registrationsWiped > 0
            var details: [String: JSONValue] = [
                "reason": .string(revocation.reason.rawValue), "device": .string(revocation.selector),
                "deviceId": revocation.deviceId.map(JSONValue.string) ?? .null, "thisDevice": .bool(revocation.thisDevice),
                "deletedOnServer": .array(revocation.deletedOnServer.map(JSONValue.string)),
                "alreadyGone": .array(revocation.alreadyGone.map(JSONValue.string)),
                "clientDeleted": .bool(revocation.clientDeleted),
                "revokedHere": .array(outcome.revokedHere.map(JSONValue.string)),
                "tokenSetsWiped": .int(Int64(outcome.tokenSetsWiped)),
                "registrationsWiped": .int(Int64(outcome.registrationsWiped)), "changed": .bool(changed),
            ]
            if let failure = revocation.failure { details["failure"] = .string(failure) }
            try writer.appendAudit(auditEvent("admin.deviceRevoked", userId: revocation.userId, details: details))
            return outcome
        }
        // The revoked keys' sealed blobs must not linger in -wal.
        if !outcome.revokedHere.isEmpty { store.checkpointDestroyedData() }
        return outcome
    }

    /// Whether this store's audit log shows an earlier `admin revoke` of `userId` that deleted, on the server, a
    /// binding `text` names: by its device id (`byDeviceId`) or its uuid, in whole or by a prefix of 8 or more
    /// characters. Only then may a device the server no longer lists be called "already revoked".
    public func revokedBefore(userId: String, text: String, byDeviceId: Bool) throws -> Bool {
        try authorize(userId: userId)
        let names = { (value: String) in value == text || (text.count >= Self.shortKidLength && value.hasPrefix(text)) }
        let records = try read { try $0.auditEvents(AuditQuery(userId: userId, event: "admin.deviceRevoked")) }
        return records.contains { record in
            guard let details = try? JSONDecoder().decode(JSONValue.self, from: Data(record.details.utf8)),
                  case .object(let members) = details,
                  case .array(let deleted) = members["deletedOnServer"] ?? .array([]), !deleted.isEmpty else { return false }
            if byDeviceId {
                guard case .string(let deviceId) = members["deviceId"] ?? .null else { return false }
                return names(deviceId)
            }
            return deleted.contains { if case .string(let uuid) = $0 { names(uuid) } else { false } }
        }
    }

    /// Audits an administrator's listing of server bindings: `admin devices` (or, with `staleDays`, `admin stale`).
    /// `userId` is the one user asked about, nil for every known user.
    public func recordDeviceListing(userId: String?, users: Int, bindings: Int, staleDays: Int? = nil) throws {
        if let userId { try authorize(userId: userId) }
        var details: [String: JSONValue] = ["users": .int(Int64(users)), "bindings": .int(Int64(bindings))]
        if let staleDays { details["days"] = .int(Int64(staleDays)) }
        let event = staleDays == nil ? "admin.devicesListed" : "admin.staleListed"
        try appendAuditOnly([auditEvent(event, userId: userId, details: details)])
    }
}
