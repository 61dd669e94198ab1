import Foundation
import Storage

extension KeyManager {
    /// The events keymgr records, for people filtering the log.
    public static let knownAuditEvents: Set<String> = Set<String>([
        "store.initialized", "key.bound", "key.rebound", "key.signed", "key.superseded", "key.revoked", "key.locked",
        "key.registered", "key.revokedByServer", "key.deletedOnServer", "orphan.deletedOnServer", "credentials.wiped",
        "pin.changed", "pin.failed", "pin.parametersUpgraded", "master.rotated", "server.configured", "store.integrityStamped",
        "key.bindingRefused", "dcr.registered", "dcr.read", "dcr.deleted", "dcr.revokedByServer", "tokens.imported",
        "tokens.login", "tokens.refreshed", "tokens.discarded", "config.changed", "server.removed",
    ]).union(adminAuditEvents)

    /// Audit entries matching `filter`, in its order (oldest first unless `newestFirst`). An event name keymgr
    /// does not know, and the log does not hold, is a usage error that lists the names it knows.
    public func auditEntries(_ filter: AuditFilter = AuditFilter()) throws -> [AuditEntry] {
        var entries: [AuditEntry] = []
        try forEachAuditEntry(filter) { entries.append($0) }
        return entries
    }

    /// Calls `body` with each audit entry matching `filter` as the store reads them, all from one snapshot: memory
    /// stays flat however long the log, and with `filter.newest` the cost does not grow with it. `body` runs inside
    /// the read: it should print or count, not call back into the store.
    public func forEachAuditEntry(_ filter: AuditFilter, _ body: (AuditEntry) throws -> Void) throws {
        if let event = filter.event, !Self.knownAuditEvents.contains(event), try !read({ try $0.auditHasEvent(event) }) {
            let known = try Self.knownAuditEvents.union(read { try $0.auditEventNames() })
            throw KeyManagerError(.usage, "there is no audit event \(event): the events are \(known.sorted().joined(separator: ", "))")
        }
        let query = AuditQuery(userId: filter.userId, since: filter.since, event: filter.event, newest: filter.newest,
                               newestFirst: filter.newestFirst)
        let decoder = JSONDecoder()
        try read { reader in
            try reader.forEachAuditEvent(query) { record in
                let details = JSONValue.parseCommon(record.details)
                    ?? (try? decoder.decode(JSONValue.self, from: Data(record.details.utf8))) ?? .object([:])
                try body(AuditEntry(seq: record.seq, at: record.at, event: record.event, userId: record.userId,
                                    kid: record.kid, actor: record.actor, details: details,
                                    hash: record.hash, prevHash: record.prevHash))
            }
        }
    }

    /// Recomputes the hash chain and the keyed (HMAC) chain under the master key, checks the anchor of the newest
    /// entry, and reports the first entry that does not hold: a rewritten chain, a chain copied from another store,
    /// or a tail cut off.
    public func verifyAudit() throws -> AuditVerification {
        let keys = integrity.auditKeys
        let report = try read { try $0.verifyAuditChain(keys: keys) }
        return AuditVerification(checked: report.checked,
                                 firstBad: report.firstBad.map { .init(seq: $0.seq, reason: $0.reason) })
    }
}

extension KeyManager {
    /// For benchmarks only (`keymgr-benchdata audit-log`): appends `count` `key.signed` entries for `kid`, as a
    /// signature records them (same event, details, hash chain, MAC and anchor), `batch` to a transaction, without
    /// the signatures: a log of a million entries in minutes rather than the hours of a million `sign` calls.
    @_spi(Benchmarks)
    public func appendSignedEntriesForBenchmark(userId: String, kid: String, count: Int, batch: Int = 10_000) throws {
        var left = count
        while left > 0 {
            let now = min(left, batch)
            try write { writer in
                for _ in 0..<now {
                    try writer.appendAudit(auditEvent("key.signed", userId: userId, kid: kid, details: ["claims": .array([])]))
                }
            }
            left -= now
        }
    }
}
