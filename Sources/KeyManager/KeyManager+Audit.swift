import Foundation
import Storage

extension KeyManager {
    /// Audit entries matching `query`, oldest first.
    public func auditEntries(_ query: AuditQuery = AuditQuery()) throws -> [AuditEntry] {
        try read { reader in
            try reader.auditEvents(query).map { record in
                let details = (try? JSONDecoder().decode(JSONValue.self, from: Data(record.details.utf8))) ?? .object([:])
                return AuditEntry(seq: record.seq, at: record.at, event: record.event, userId: record.userId,
                                  kid: record.kid, actor: record.actor, details: details,
                                  hash: record.hash, prevHash: record.prevHash)
            }
        }
    }

    /// Recomputes the hash chain and reports the first entry that does not hold.
    public func verifyAudit() throws -> AuditChainReport {
        try read { try $0.verifyAuditChain() }
    }
}
