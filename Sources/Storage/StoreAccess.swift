import Foundation
import GRDB

/// Read access to the store inside one snapshot. The queries live beside their records, one file a table
/// (`Records/<Record>+Queries.swift`).
///
/// Valid only inside the `Store.read`/`Store.write` closure it was handed to.
public class StoreReader {
    let db: Database
    let digest: AuditDigest
    let auditKeys: AuditKeys?

    init(db: Database, digest: @escaping AuditDigest, auditKeys: AuditKeys? = nil) {
        self.db = db
        self.digest = digest
        self.auditKeys = auditKeys
    }
}

/// Write access inside one transaction: every change keymgr makes, beside the queries of its table.
public final class StoreWriter: StoreReader {}
