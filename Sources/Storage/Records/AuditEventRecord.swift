import Foundation
import GRDB

/// One entry of the append-only, hash-chained audit log.
public struct AuditEventRecord: Codable, Sendable, Equatable, FetchableRecord, TableRecord {
    public static let databaseTableName = "audit_events"
    public static var databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy { .convertFromSnakeCase }

    public var seq: Int64
    /// When it happened, as keymgr's timestamp text (kept as text: it is hashed exactly as stored).
    public var at: String
    /// What happened, e.g. `key.bound`, `pin.failed`, `key.revoked`.
    public var event: String
    public var userId: String?
    public var kid: String?
    /// The OS user who ran keymgr.
    public var actor: String
    /// A canonical JSON object; never a secret, identifiers of secrets only as HMACs.
    public var details: String
    /// Hex SHA-256 of the entry before (64 zeros for the first).
    public var prevHash: String
    /// Hex SHA-256(prevHash bytes || canonical bytes of this entry).
    public var hash: String
    /// Hex HMAC-SHA256 under the master-derived audit key over the previous entry's mac, this entry and its hash;
    /// nil only in a store that was not yet opened with its master key since the keyed chain came.
    public var mac: String?
}

/// An audit entry to append; `seq` and the hashes are assigned by the store.
public struct NewAuditEvent: Sendable, Equatable {
    public var at: Date
    public var event: String
    public var userId: String?
    public var kid: String?
    public var actor: String
    public var details: String

    public init(at: Date, event: String, userId: String? = nil, kid: String? = nil, actor: String, details: String = "{}") {
        self.at = at
        self.event = event
        self.userId = userId
        self.kid = kid
        self.actor = actor
        self.details = details
    }
}

/// Filters for reading the audit log, and which end of it to read.
public struct AuditQuery: Sendable, Equatable {
    public var userId: String?
    public var since: Date?
    public var event: String?
    /// Only the newest `newest` matching entries (read from the end of the log, whatever its length).
    public var newest: Int?
    /// Newest first instead of oldest first.
    public var newestFirst: Bool

    public init(userId: String? = nil, since: Date? = nil, event: String? = nil, newest: Int? = nil,
                newestFirst: Bool = false) {
        self.userId = userId
        self.since = since
        self.event = event
        self.newest = newest
        self.newestFirst = newestFirst
    }
}

/// The result of checking the audit chain: how many entries were checked, and the first bad one if any.
public struct AuditChainReport: Sendable, Equatable {
    public var checked: Int
    public var firstBad: Break?

    /// The first entry where the chain does not hold, and why.
    public struct Break: Sendable, Equatable {
        public var seq: Int64
        public var reason: String
    }

    public var isIntact: Bool { firstBad == nil }
}
