import Foundation
import GRDB

/// Read access to the store inside one snapshot. The queries live beside their records, one file a table
/// (`Records/<Record>+Queries.swift`).
///
/// Valid only inside the `Store.read`/`Store.write` closure it was handed to.
public class StoreReader {
    let db: Database
    let digest: AuditDigest

    init(db: Database, digest: @escaping AuditDigest) {
        self.db = db
        self.digest = digest
    }
}

/// Write access inside one transaction: every change keymgr makes, beside the queries of its table.
public final class StoreWriter: StoreReader {}
