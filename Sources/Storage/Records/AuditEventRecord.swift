import Foundation
import GRDB

/// One entry of the append-only, hash-chained audit log.
package struct AuditEventRecord: Codable, Sendable, Equatable, FetchableRecord, TableRecord {
    package static let databaseTableName = "audit_events"
    package static var databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy { .convertFromSnakeCase }

    package var seq: Int64
    /// When it happened, as keymgr's timestamp text (kept as text: it is hashed exactly as stored).
    package var at: String
    /// What happened, e.g. `key.bound`, `pin.failed`, `key.revoked`.
    package var event: String
    package var userId: String?
    package var kid: String?
    /// The OS user who ran keymgr.
    package var actor: String
    /// A canonical JSON object; never a secret, identifiers of secrets only as HMACs.
    package var details: String
    /// Hex SHA-256 of the entry before (64 zeros for the first).
    package var prevHash: String
    /// Hex SHA-256(prevHash bytes || canonical bytes of this entry).
    package var hash: String
    /// Hex HMAC-SHA256 under the master-derived audit key over the previous entry's mac, this entry and its hash;
    /// nil only in a store that was not yet opened with its master key since the keyed chain came.
    package var mac: String?
}

/// An audit entry to append; `seq` and the hashes are assigned by the store.
package struct NewAuditEvent: Sendable, Equatable {
    package var at: Date
    package var event: String
    package var userId: String?
    package var kid: String?
    package var actor: String
    package var details: String

    package init(at: Date, event: String, userId: String? = nil, kid: String? = nil, actor: String, details: String = "{}") {
        self.at = at
        self.event = event
        self.userId = userId
        self.kid = kid
        self.actor = actor
        self.details = details
    }
}

/// Filters for reading the audit log, and which end of it to read.
package struct AuditQuery: Sendable, Equatable {
    package var userId: String?
    package var since: Date?
    package var event: String?
    /// Only the newest `newest` matching entries (read from the end of the log, whatever its length).
    package var newest: Int?
    /// Newest first instead of oldest first.
    package var newestFirst: Bool

    package init(userId: String? = nil, since: Date? = nil, event: String? = nil, newest: Int? = nil,
                newestFirst: Bool = false) {
        self.userId = userId
        self.since = since
        self.event = event
        self.newest = newest
        self.newestFirst = newestFirst
    }
}

/// The result of checking the audit chain: how many entries were checked, and the first bad one if any.
package struct AuditChainReport: Sendable, Equatable {
    package var checked: Int
    package var firstBad: Break?

    /// The first entry where the chain does not hold, and why.
    package struct Break: Sendable, Equatable {
        package var seq: Int64
        package var reason: String
    }

    package var isIntact: Bool { firstBad == nil }
}

extension AuditEventRecord {
    /// The columns queries order or filter by.
    package enum Columns {
        static let seq = Column("seq")
    }
}
