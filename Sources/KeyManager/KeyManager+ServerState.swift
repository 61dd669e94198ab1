import Foundation
import Storage

/// Changes to one user's keys that follow from what the identity server said, applied in one transaction.
///
/// Built by the sync reconciler (and by journeys); applying the same changes twice writes nothing the second time.
public struct ServerChanges: Sendable, Equatable {
    /// A key the server lists: mark it registered and mirror the server's name and last access.
    public struct Listed: Sendable, Equatable {
        public var kid: String
        public var deviceName: String?
        public var lastAccessAt: Date?

        public init(kid: String, deviceName: String?, lastAccessAt: Date?) {
            self.kid = kid
            self.deviceName = deviceName
            self.lastAccessAt = lastAccessAt
        }
    }

    public var userId: String
    /// Keys the server lists (rule 1).
    public var listed: [Listed] = []
    /// Registered keys a complete listing no longer holds: revoked by the server (rule 2).
    public var revokedByServer: [String] = []
    /// Retired keys now gone from the server, by our DELETE or someone else's (rule 3).
    public var deletedOnServer: [String] = []
    /// Orphans this run deleted from the server with `--prune-orphans` (rule 4): audited only.
    public var prunedOrphans: [String] = []

    public init(userId: String) {
        self.userId = userId
    }

    public var isEmpty: Bool { listed.isEmpty && revokedByServer.isEmpty && deletedOnServer.isEmpty && prunedOrphans.isEmpty }
}

/// What applying server changes did.
public struct ServerChangesOutcome: Sendable, Equatable {
    /// Kids that became `registered` now.
    public var registered: [String] = []
    /// Kids revoked locally because the server no longer holds them.
    public var revoked: [String] = []
    /// Kids now recorded as deleted on the server.
    public var serverDeleted: [String] = []
    /// Rows written (0 when everything was already in step): the sum of `writesByKind`.
    public var writes: Int { writesByKind.total }
    /// Rows written, by what they record.
    public var writesByKind = SyncWrites()
}

/// Rows a sync wrote (key rows and their audit entries), by what they record.
public struct SyncWrites: Sendable, Equatable {
    /// Keys newly marked registered, and their `key.registered` entries.
    public var registered = 0
    /// Keys whose server-side device name or last access changed, copied here (rule 1).
    public var mirrored = 0
    /// Keys revoked because the server no longer holds them, and their entries (rule 2).
    public var revoked = 0
    /// Retired keys recorded as deleted on the server, and their entries (rule 3).
    public var serverDeleted = 0
    /// Audit entries of orphans deleted on the server (rule 4).
    public var orphansPruned = 0
    /// Token sets and client registrations wiped after a revocation, and their entries.
    public var credentialsWiped = 0
    /// Client registrations the server no longer knows, wiped here (rule 5).
    public var registrationsWiped = 0

    public init() {}

    public var total: Int {
        registered + mirrored + revoked + serverDeleted + orphansPruned + credentialsWiped + registrationsWiped
    }

    public static func + (lhs: SyncWrites, rhs: SyncWrites) -> SyncWrites {
        var sum = lhs
        sum.registered += rhs.registered
        sum.mirrored += rhs.mirrored
        sum.revoked += rhs.revoked
        sum.serverDeleted += rhs.serverDeleted
        sum.orphansPruned += rhs.orphansPruned
        sum.credentialsWiped += rhs.credentialsWiped
        sum.registrationsWiped += rhs.registrationsWiped
        return sum
    }
}

extension KeyManager {
    /// The device's stable id and name, as the server sees them on every binding from here.
    public func deviceIdentity() throws -> (deviceId: String, deviceName: String) {
        let device = try device()
        return (device.deviceId, device.deviceName)
    }

    /// Why sync revoked a key (rule 2), as its audit entries say.
    static let removedOnServerReason = "removed on the server (an administrator or the user deleted the binding)"

    /// Applies one user's server changes in one transaction, with an audit entry per change.
    /// Only rows whose values really change are written.
    @discardableResult
    public func apply(_ changes: ServerChanges) throws -> ServerChangesOutcome {
        try apply([changes])[0]
    }

    /// Applies several users' server changes in one transaction (one commit, one sync, for a whole batch of a
    /// sync run), each user's as `apply(_:)` would; the outcomes are in the order of `batch`. Either all of them
    /// commit or none does. Nothing is written for a batch with nothing to change.
    public func apply(_ batch: [ServerChanges]) throws -> [ServerChangesOutcome] {
        guard batch.contains(where: { !$0.isEmpty }) else { return batch.map { _ in ServerChangesOutcome() } }
        for changes in batch where !changes.isEmpty { try authorize(userId: changes.userId) }
        let at = now()
        let outcomes = try write { writer in
            try batch.map { try applying($0, writer, at: at) }
        }
        // Keys the server revoked: their sealed blobs must not linger in -wal.
        if outcomes.contains(where: { !$0.revoked.isEmpty }) { store.checkpointDestroyedData() }
        return outcomes
    }

    /// One user's server changes, inside the caller's write transaction.
    private func applying(_ changes: ServerChanges, _ writer: StoreWriter, at: Date) throws -> ServerChangesOutcome {
        var outcome = ServerChangesOutcome()
        for listed in changes.listed {
            guard var key = try writer.key(kid: listed.kid), key.userId == changes.userId else { continue }
            let before = key
            let registering = key.serverState == .unregistered && (key.status == .active || key.status == .locked)
            if registering {
                key.serverState = .registered
                outcome.registered.append(key.kid)
                try writer.appendAudit(auditEvent("key.registered", userId: key.userId, kid: key.kid))
                outcome.writesByKind.registered += 1
            }
            if let name = listed.deviceName { key.deviceName = name }
            if let access = listed.lastAccessAt, Timestamp.milliseconds(access) != key.serverLastAccessAt.map(Timestamp.milliseconds) {
                key.serverLastAccessAt = access
            }
            if key != before {
                try writer.update(key)
                if registering { outcome.writesByKind.registered += 1 } else { outcome.writesByKind.mirrored += 1 }
            }
        }
        var wipeCredentials = false
        for kid in changes.revokedByServer {
            guard var key = try writer.key(kid: kid), key.userId == changes.userId,
                  key.status == .active || key.status == .locked else { continue }
            destroy(&key, status: .revoked, reason: "removed from the server", at: at)
            key.serverState = .deleted
            try writer.update(key)
            try writer.deleteAppPIN(kid: kid)
            try writer.appendAudit(auditEvent("key.revokedByServer", userId: key.userId, kid: kid, details: [
                "reason": .string(Self.removedOnServerReason),
            ]))
            outcome.revoked.append(kid)
            outcome.writesByKind.revoked += 2
            wipeCredentials = true
        }
        for kid in changes.deletedOnServer {
            guard var key = try writer.key(kid: kid), key.userId == changes.userId, key.serverState != .deleted else { continue }
            key.serverState = .deleted
            try writer.update(key)
            try writer.appendAudit(auditEvent("key.deletedOnServer", userId: key.userId, kid: kid))
            outcome.serverDeleted.append(kid)
            outcome.writesByKind.serverDeleted += 2
        }
        for kid in changes.prunedOrphans {
            try writer.appendAudit(auditEvent("orphan.deletedOnServer", userId: changes.userId, kid: kid))
            outcome.writesByKind.orphansPruned += 1
        }
        if wipeCredentials {
            // The server revoked the binding: the tokens, DPoP keys and client registrations of this device
            // that rode on it go too (the sync service has already asked the server to delete the client).
            let tokens = try writer.deleteTokenSets(userId: changes.userId)
            let registrations = try writer.deleteRegistrations(userId: changes.userId)
            if tokens + registrations > 0 {
                try writer.appendAudit(auditEvent("credentials.wiped", userId: changes.userId, details: [
                    "tokenSets": .int(Int64(tokens)), "registrations": .int(Int64(registrations)),
                    "reason": .string(Self.removedOnServerReason),
                ]))
                outcome.writesByKind.credentialsWiped += tokens + registrations + 1
            }
        }
        return outcome
    }
}

extension KeyManager {
    /// The server profile named `name`, or nil when none is configured.
    ///
    /// - Throws: `tampered` when the stored profile was edited outside keymgr (its MAC does not hold), so the admin
    ///   credential is never sent to a URL an administrator did not set; `config` when it breaks a rule of `checkSafe`.
    public func serverSettings(name: String = "default") throws -> ServerSettings? {
        guard let record = try read({ reader in try reader.server(name: name) }) else { return nil }
        let settings = try ServerSettings(record)
        try checkSafe(settings)
        return settings
    }

    /// The server profile named `name` (`server show`).
    /// - Throws: `clientNotRegistered` when there is no profile `name`, `config` when no server is configured at all,
    ///   besides what `serverSettings(name:)` throws.
    public func serverProfile(name: String) throws -> ServerSettings {
        guard let settings = try serverSettings(name: name) else {
            guard name != "default" else {
                throw KeyManagerError(.config, "no server is configured: "
                    + "run `keymgr server set --dialect pingam --base-url URL --credential-file F`")
            }
            throw KeyManagerError(.clientNotRegistered, "no server profile \(name): see `keymgr server list`")
        }
        return settings
    }

    /// Saves a server profile (settings only: the admin credential stays in its file) and audits the change.
    ///
    /// - Throws: `config` for plain `http://` to a host other than loopback (unless `allowInsecureHTTP`), and for a
    ///   credential file inside the store's home, the systemd credentials directory or the master key file.
    public func configureServer(_ settings: ServerSettings) throws {
        try checkSafe(settings)
        try write { writer in
            let record = ServerRecord(settings, updatedAt: now())
            try writer.save(record)
            try writer.appendAudit(auditEvent("server.configured", details: [
                "name": .string(record.name), "dialect": .string(settings.dialect.rawValue), "baseUrl": .string(record.baseUrl),
                "allowInsecureHttp": .bool(settings.allowInsecureHTTP),
            ]))
        }
    }

    /// Records what a server's answers showed of its clock (seconds ahead of this device; negative: behind), for the
    /// next process's DPoP proofs and for `keymgr status`. Not audited: it decides nothing but a proof's `iat`.
    public func recordServerClockOffset(name: String, offset: TimeInterval) throws {
        try write { writer in
            guard var record = try writer.server(name: name) else { return }
            let seconds = Int64(offset.rounded())
            record.clockOffsetSeconds = seconds == 0 ? nil : seconds
            try writer.save(record)
        }
    }

    /// `server set`: changes only what `change` gives in the profile `name` (a new profile takes the defaults for
    /// the rest), checks the result as `configureServer` does, and saves it, audited, in one transaction.
    /// A store keeps its keys' registrations at one device registry: only one profile may have the `pingam` dialect.
    /// - Returns: the saved profile.
    @discardableResult
    public func configureServer(name: String, _ change: ServerSettingsChange) throws -> ServerSettings {
        try Self.checkProfileName(name)
        let existing = try serverSettingsForChange(name: name)
        let settings = try change.applied(to: existing, name: name, at: now())
        try checkSafe(settings)
        if settings.dialect.hasDeviceRegistry,
           let other = try read({ try $0.servers() })
               .first(where: { $0.name != name && DialectName(stored: $0.dialect)?.hasDeviceRegistry == true }) {
            throw KeyManagerError(.config, "the profile \(other.name) already has a device registry "
                + "(\(DialectName(stored: other.dialect)?.rawValue ?? other.dialect)): a store's keys "
                + "are registered at one device registry. Use `--profile \(other.name)`, or remove it first with "
                + "`keymgr server remove --profile \(other.name)`")
        }
        try write { writer in
            let record = ServerRecord(settings, updatedAt: settings.updatedAt)
            try writer.save(record)
            try writer.appendAudit(auditEvent("server.configured", details: [
                "name": .string(record.name), "dialect": .string(settings.dialect.rawValue), "baseUrl": .string(record.baseUrl),
                "allowInsecureHttp": .bool(settings.allowInsecureHTTP), "created": .bool(existing == nil),
            ]))
        }
        return try serverSettings(name: name) ?? settings
    }

    /// The profile to change: a stored one whose rules no longer hold (say, a credential file that moved into the
    /// home) is still changed, so `server set` can repair it; a tampered one is not.
    private func serverSettingsForChange(name: String) throws -> ServerSettings? {
        guard let record = try read({ reader in try reader.server(name: name) }) else { return nil }
        return try ServerSettings(record)
    }

    /// Every server profile, by name.
    public func serverProfiles() throws -> [ServerSettings] {
        try read { reader in try reader.servers() }.map(ServerSettings.init)
    }

    /// What removing the profile `name` would take with it; changes nothing.
    /// - Throws: `clientNotRegistered` when there is no such profile.
    public func serverRemoval(name: String) throws -> ServerRemoval {
        try read { reader in
            guard try reader.server(name: name) != nil else {
                let names = try reader.servers().map(\.name)
                throw KeyManagerError(.clientNotRegistered, "no server profile \(name)"
                    + (names.isEmpty ? ": none is configured" : " (there are: \(names.joined(separator: ", ")))"))
            }
            let counts = try reader.credentialCounts(serverName: name)
            return ServerRemoval(name: name, registrations: counts.registrations, tokenSets: counts.tokenSets)
        }
    }

    /// `server remove`: deletes the profile and the client registrations, tokens and DPoP keys kept for it here
    /// (nothing is sent to the server), audited as `server.removed`.
    @discardableResult
    /// `confirm` is asked first with what the removal would take (`serverRemoval`; an unknown profile fails before it
    /// is asked) and may throw to stop.
    public func removeServer(name: String, confirm: (ServerRemoval) throws -> Void) throws -> ServerRemoval {
        try confirm(try serverRemoval(name: name))
        return try removeServer(name: name)
    }

    public func removeServer(name: String) throws -> ServerRemoval {
        let removal = try write { writer in
            guard try writer.server(name: name) != nil else {
                throw KeyManagerError(.clientNotRegistered, "no server profile \(name)")
            }
            let counts = try writer.deleteServer(name: name)
            try writer.appendAudit(auditEvent("server.removed", details: [
                "name": .string(name), "registrations": .int(Int64(counts.registrations)),
                "tokenSets": .int(Int64(counts.tokenSets)),
            ]))
            return ServerRemoval(name: name, registrations: counts.registrations, tokenSets: counts.tokenSets)
        }
        store.checkpointDestroyedData()
        return removal
    }

    /// A profile name: letters, digits, `-`, `_` and `.`, 1 to 64 characters.
    static func checkProfileName(_ name: String) throws {
        let allowed = name.unicodeScalars.allSatisfy {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.".unicodeScalars.contains($0))
        }
        guard (1...64).contains(name.count), allowed else {
            throw KeyManagerError(.usage, "a profile name is 1 to 64 letters, digits, '-', '_' or '.', not '\(name)'")
        }
    }

    /// The rules a server profile must keep, checked when it is set and again before every use.
    func checkSafe(_ settings: ServerSettings) throws {
        try settings.checkRules()
        guard let file = settings.credentialFile else { return }
        let credential = Self.resolved(file)
        var protected = [(Self.resolved(store.home.url.path), "the store's home")]
        if let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty {
            protected.append((Self.resolved(directory), "the systemd credentials directory"))
        }
        protected.append((Self.resolved(masterKeySource.path), "the master key"))
        for (path, what) in protected where credential == path || credential.hasPrefix(path + "/") {
            throw KeyManagerError(.config, "the credential file \(file) is inside \(what) (\(path)): keymgr will not send "
                + "what is there to a server. Keep the admin token in a file of its own, e.g. /etc/keymgr/admin.token")
        }
    }

    /// An absolute path with symbolic links resolved, so no link can hide where a file really is.
    static func resolved(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
    }
}

extension KeyManager {
    /// Records the outcome of a sync run (bookkeeping: not audited, not counted as a reconciliation write).
    public func recordSync(_ summary: SyncSummary) throws {
        let errors = JSONValue.array(summary.errors.map {
            .object(["userId": .string($0.userId), "code": .string($0.code.rawValue), "message": .string($0.message)])
        }).canonicalJSON()
        let state = SyncStateRecord(
            serverName: summary.serverName, startedAt: summary.startedAt, finishedAt: summary.finishedAt,
            users: summary.users, inSync: summary.inSync, registered: summary.registered, revoked: summary.revoked,
            serverDeleted: summary.serverDeleted, orphans: summary.orphans, errors: summary.errors.count,
            errorSummary: errors)
        try write { try $0.save(state) }
    }
}

extension ServerSettings {
    init(_ record: ServerRecord) throws {
        guard let baseURL = URL(string: record.baseUrl) else {
            throw KeyManagerError(.config, "the server profile \(record.name) has no usable base URL: run `keymgr server set` again")
        }
        let endpoint = { (text: String?) in text.flatMap(URL.init(string:)) }
        guard let dialect = DialectName(stored: record.dialect) else {
            throw KeyManagerError(.config, "the server profile \(record.name) names a dialect this keymgr does not know "
                + "(\(record.dialect)): run `keymgr server set --profile \(record.name) --dialect NAME` (\(DialectName.accepted))")
        }
        self.init(name: record.name, dialect: dialect, baseURL: baseURL,
                  realmPath: record.realmPath, credentialFile: record.credentialFile,
                  credentialHeader: record.credentialHeader, tokenEndpoint: endpoint(record.tokenEndpoint),
                  registrationEndpoint: endpoint(record.registrationEndpoint),
                  revocationEndpoint: endpoint(record.revocationEndpoint),
                  deviceAuthorizationEndpoint: endpoint(record.deviceAuthorizationEndpoint),
                  tokenBinding: record.tokenBinding == .bound ? .bound : .unbound, updatedAt: record.updatedAt,
                  allowInsecureHTTP: record.allowInsecureHttp)
        clockOffset = TimeInterval(record.clockOffsetSeconds ?? 0)
    }
}

extension ServerRecord {
    init(_ settings: ServerSettings, updatedAt: Date) {
        self.init(name: settings.name, dialect: settings.dialect.dialect.storedName,
                  baseUrl: settings.baseURL.absoluteString, realmPath: settings.realmPath,
                  credentialFile: settings.credentialFile, credentialHeader: settings.credentialHeader,
                  tokenEndpoint: settings.tokenEndpoint?.absoluteString,
                  registrationEndpoint: settings.registrationEndpoint?.absoluteString,
                  revocationEndpoint: settings.revocationEndpoint?.absoluteString,
                  deviceAuthorizationEndpoint: settings.deviceAuthorizationEndpoint?.absoluteString,
                  tokenBinding: settings.tokenBinding == .bound ? .bound : .unbound, updatedAt: updatedAt)
        allowInsecureHttp = settings.allowInsecureHTTP
        clockOffsetSeconds = settings.clockOffset == 0 ? nil : Int64(settings.clockOffset.rounded())
    }
}
