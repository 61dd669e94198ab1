import Foundation
import GRDB

// The queries of `AuditEventRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The event names the log holds.
    public func auditEventNames() throws -> Set<String> {
        Set(try String.fetchAll(db, sql: "SELECT DISTINCT event FROM audit_events"))
    }

    /// Audit entries matching `query`, oldest first.
    public func auditEvents(_ query: AuditQuery = AuditQuery()) throws -> [AuditEventRecord] {
        var request = AuditEventRecord.all()
        if let userId = query.userId { request = request.filter(Column("user_id") == userId) }
        if let since = query.since { request = request.filter(Column("at") >= Timestamp.string(from: since)) }
        if let event = query.event { request = request.filter(Column("event") == event) }
        return try request.order(Column("seq")).fetchAll(db)
    }

    /// Recomputes the audit chain from the first entry and reports the first entry that does not hold.
    public func verifyAuditChain() throws -> AuditChainReport {
        var expectedPrev = AuditChain.genesis
        var checked = 0
        let cursor = try AuditEventRecord.order(Column("seq")).fetchCursor(db)
        while let entry = try cursor.next() {
            if entry.prevHash != expectedPrev {
                return AuditChainReport(checked: checked, firstBad: .init(seq: entry.seq,
                    reason: "its prevHash does not match the entry before it: an entry was removed, inserted or reordered"))
            }
            if AuditChain.hash(of: entry, digest: digest) != entry.hash {
                return AuditChainReport(checked: checked, firstBad: .init(seq: entry.seq,
                    reason: "its content does not match its hash: the entry was altered"))
            }
            expectedPrev = entry.hash
            checked += 1
        }
        return AuditChainReport(checked: checked, firstBad: nil)
    }
}

extension StoreWriter {
    /// Appends an audit entry chained to the last one, in this transaction.
    @discardableResult
    public func appendAudit(_ event: NewAuditEvent) throws -> AuditEventRecord {
        let last = try Row.fetchOne(db, sql: "SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
        let prevHash: String = last?["hash"] ?? AuditChain.genesis
        let lastSeq: Int64 = last?["seq"] ?? 0
        var entry = AuditEventRecord(seq: lastSeq + 1, at: Timestamp.string(from: event.at), event: event.event,
                                     userId: event.userId, kid: event.kid, actor: event.actor, details: event.details,
                                     prevHash: prevHash, hash: "")
        entry.hash = AuditChain.hash(of: entry, digest: digest)
        try db.execute(sql: """
            INSERT INTO audit_events (seq, at, event, user_id, kid, actor, details, prev_hash, hash)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [entry.seq, entry.at, entry.event, entry.userId, entry.kid, entry.actor, entry.details,
                             entry.prevHash, entry.hash])
        return entry
    }
}
