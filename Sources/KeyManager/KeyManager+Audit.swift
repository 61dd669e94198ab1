import Foundation
import Storage

extension KeyManager {
    /// The events keymgr records, for people filtering the log.
    public static let knownAuditEvents: Set<String> = Set<String>([
        "store.initialized", "key.bound", "key.rebound", "key.signed", "key.superseded", "key.revoked", "key.locked",
        "key.registered", "key.revokedByServer", "key.deletedOnServer", "orphan.deletedOnServer", "credentials.wiped",
        "pin.changed", "pin.failed", "pin.parametersUpgraded", "master.rotated", "server.configured", "store.integrityStamped",
        "key.bindingRefused", "dcr.registered", "dcr.read", "dcr.deleted", "dcr.revokedByServer", "tokens.imported",
        "tokens.login", "tokens.refreshed", "tokens.discarded", "config.changed", "server.removed", "agent.denied", "audit.archived",
        "tpm.recovered",
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
        // Under the agent's policy: a user out of scope is denied; without a user, only the entries about users in
        // scope are shown (entries about no user, such as the store's settings, are not).
        if let userId = filter.userId { try authorize(userId: userId) }
        let allowed = filter.userId == nil ? try usersInScope() : nil
        if context.scope?.coversAllUsers ?? true { flushDenialsForReading() }
        let query = AuditQuery(userId: filter.userId ?? (allowed?.count == 1 ? allowed?.first : nil), since: filter.since,
                               event: filter.event, newest: filter.newest, newestFirst: filter.newestFirst)
        let decoder = JSONDecoder()
        try read { reader in
            let owners = Dictionary(try reader.personLinks().map { ($0.userId, $0.login) }, uniquingKeysWith: { first, _ in first })
            try reader.forEachAuditEvent(query) { record in
                if let allowed, !(record.userId.map(allowed.contains) ?? false) { return }
                let details = JSONValue.parseCommon(record.details)
                    ?? (try? decoder.decode(JSONValue.self, from: Data(record.details.utf8))) ?? .object([:])
                try body(AuditEntry(seq: record.seq, at: record.at, event: record.event, userId: record.userId,
                                    kid: record.kid, actor: record.actor, details: details,
                                    hash: record.hash, prevHash: record.prevHash, owner: record.userId.flatMap { owners[$0] }))
            }
        }
    }

    /// Recomputes the hash chain and the keyed (HMAC) chain under the master key, checks the anchor of the newest
    /// entry, and reports the first entry that does not hold: a rewritten chain, a chain copied from another store,
    /// or a tail cut off.
    ///
    /// Then checks the WHOLE store: every row of every table keymgr trusts against its row MAC, and each table's set
    /// of rows against what the device row commits (a deletion, or a deleted row put back, shows), naming the table
    /// and the row. A deleted row is named where the audit log tells which it was.
    public func verifyAudit() throws -> AuditVerification {
        flushDenialsForReading()
        let keys = integrity.auditKeys
        let rowKeys = integrity.rowKeys
        // One snapshot, read without row checks: this reports what is wrong instead of stopping at it.
        let (report, rows, missing) = try Self.mapped {
            try store.read { reader in
                let rows = try reader.verifyAllRows(keys: rowKeys)
                let missing = rows.problems.contains { $0.row == nil } ? try reader.missingRows() : []
                return (try reader.verifyAuditChain(keys: keys), rows, missing)
            }
        }
        var issues = rows.problems.map { AuditVerification.RowIssue(table: $0.table, row: $0.row, reason: $0.reason) }
        for gone in missing where issues.contains(where: { $0.table == gone.table && $0.row == nil }) {
            issues.append(.init(table: gone.table, row: gone.row, reason: gone.reason))
        }
        return AuditVerification(checked: report.checked,
                                 firstBad: report.firstBad.map { .init(seq: $0.seq, reason: $0.reason) },
                                 rowsChecked: rows.checked, rowIssues: issues)
    }
}

extension KeyManager {
    /// Denial counts still waiting are written before the log is read, so an administrator sees every denial so
    /// far; one that cannot be written is said in the log and does not stop the reading.
    private func flushDenialsForReading() {
        do {
            try flushDenials()
        } catch {
            logger.warning("could not write the waiting denial counts to the audit log", metadata: ["error": .string("\(error)")])
        }
    }

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
