import Foundation
import GRDB

/// Read access to the store inside one snapshot. The queries live beside their records, one file a table
/// (`Records/<Record>+Queries.swift`).
///
/// Valid only inside the `Store.read`/`Store.write` closure it was handed to.
package class StoreReader {
    let db: Database
    let digest: AuditDigest
    let auditKeys: AuditKeys?
    /// When set, every record read is checked against its row MAC first (`checked(_:_:)`).
    let rowKeys: RowIntegrityKeys?

    init(db: Database, digest: @escaping AuditDigest, auditKeys: AuditKeys? = nil, rowKeys: RowIntegrityKeys? = nil) {
        self.db = db
        self.digest = digest
        self.auditKeys = auditKeys
        self.rowKeys = rowKeys
    }
}

/// Write access inside one transaction: every change keymgr makes, beside the queries of its table.
package final class StoreWriter: StoreReader {
    /// The rows this transaction changed so far, when it stamps them at commit (`Store.write(audit:rows:)`).
    var changes: RowChangeLog?
    /// The audit entries this transaction appended, in order: sent to the journal once it committed.
    package internal(set) var appendedAudit: [AuditEventRecord] = []
}
