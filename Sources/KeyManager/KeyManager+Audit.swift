import Foundation
import Storage

extension KeyManager {
    /// Audit entries matching `query`, oldest first.
    public func auditEntries(_ filter: AuditFilter = AuditFilter()) throws -> [AuditEntry] {
        let query = AuditQuery(userId: filter.userId, since: filter.since, event: filter.event)
        return try read { reader in
            try reader.auditEvents(query).map { record in
                let details = (try? JSONDecoder().decode(JSONValue.self, from: Data(record.details.utf8))) ?? .object([:])
                return AuditEntry(seq: record.seq, at: record.at, event: record.event, userId: record.userId,
                                  kid: record.kid, actor: record.actor, details: details,
                                  hash: record.hash, prevHash: record.prevHash)
            }
        }
    }

    /// Recomputes the hash chain and reports the first entry that does not hold.
    public func verifyAudit() throws -> AuditVerification {
        let report = try read { try $0.verifyAuditChain() }
        return AuditVerification(checked: report.checked,
                                 firstBad: report.firstBad.map { .init(seq: $0.seq, reason: $0.reason) })
    }
}
