import Foundation
import GRDB

/// Read access to the store inside one snapshot: every query keymgr makes lives here.
///
/// Valid only inside the `Store.read`/`Store.write` closure it was handed to.
public class StoreReader {
    let db: Database
    let digest: AuditDigest

    init(db: Database, digest: @escaping AuditDigest) {
        self.db = db
        self.digest = digest
    }

    // MARK: Device

    /// The device row, or nil before `init`.
    public func device() throws -> DeviceRecord? { try DeviceRecord.fetchOne(db, key: 1) }

    // MARK: Users

    public func user(id userId: String) throws -> UserRecord? { try UserRecord.fetchOne(db, key: userId) }

    /// Every user, by user id.
    public func users() throws -> [UserRecord] {
        try UserRecord.fetchAll(db, sql: "SELECT * FROM users ORDER BY user_id")
    }

    /// How many users and usable (active or locked) keys the store holds.
    public func counts() throws -> (users: Int, usableKeys: Int) {
        let users = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM users") ?? 0
        let keys = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM user_keys WHERE status IN ('active', 'locked')") ?? 0
        return (users, keys)
    }

    // MARK: Keys

    public func key(kid: String) throws -> UserKeyRecord? { try UserKeyRecord.fetchOne(db, key: kid) }

    /// The keys of one user (or of every user when `userId` is nil) whose status is in `statuses`, oldest first.
    public func keys(userId: String? = nil, statuses: Set<UserKeyRecord.Status>) throws -> [UserKeyRecord] {
        var request = UserKeyRecord.filter(statuses.map(\.rawValue).contains(Column("status")))
        if let userId { request = request.filter(Column("user_id") == userId) }
        return try request.order(Column("user_id"), Column("created_at"), Column("kid")).fetchAll(db)
    }

    /// Keys with their owners' usernames, for listing.
    public func keyListings(userId: String? = nil, statuses: Set<UserKeyRecord.Status>) throws -> [KeyListing] {
        let placeholders = Array(repeating: "?", count: statuses.count).joined(separator: ", ")
        var arguments: StatementArguments = StatementArguments(statuses.map(\.rawValue).sorted())
        var sql = """
            SELECT k.*, u.username AS owner_username FROM user_keys k JOIN users u ON u.user_id = k.user_id
            WHERE k.status IN (\(placeholders))
            """
        if let userId {
            sql += " AND k.user_id = ?"
            arguments += [userId]
        }
        sql += " ORDER BY k.user_id, k.created_at, k.kid"
        return try Row.fetchAll(db, sql: sql, arguments: arguments).map { row in
            KeyListing(key: try UserKeyRecord(row: row), username: row["owner_username"])
        }
    }

    /// Keys in a given server state (e.g. those queued for deletion on the server).
    public func keys(serverState: UserKeyRecord.ServerState) throws -> [UserKeyRecord] {
        try UserKeyRecord.filter(Column("server_state") == serverState.rawValue).order(Column("kid")).fetchAll(db)
    }

    // MARK: PINs

    public func appPIN(kid: String) throws -> AppPINRecord? { try AppPINRecord.fetchOne(db, key: kid) }

    /// Every PIN record (for re-wrapping under a new master key).
    public func appPINs() throws -> [AppPINRecord] { try AppPINRecord.fetchAll(db) }

    // MARK: Servers, registrations, tokens

    public func server(name: String = "default") throws -> ServerRecord? { try ServerRecord.fetchOne(db, key: name) }

    public func servers() throws -> [ServerRecord] { try ServerRecord.order(Column("name")).fetchAll(db) }

    public func registration(userId: String, serverName: String) throws -> RegistrationRecord? {
        try RegistrationRecord.fetchOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    public func registrations(userId: String? = nil) throws -> [RegistrationRecord] {
        var request = RegistrationRecord.all()
        if let userId { request = request.filter(Column("user_id") == userId) }
        return try request.fetchAll(db)
    }

    public func tokenSet(userId: String, serverName: String) throws -> TokenRecord? {
        try TokenRecord.fetchOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    public func tokenSets(userId: String? = nil) throws -> [TokenRecord] {
        var request = TokenRecord.all()
        if let userId { request = request.filter(Column("user_id") == userId) }
        return try request.fetchAll(db)
    }

    // MARK: Sync

    public func syncState(serverName: String = "default") throws -> SyncStateRecord? {
        try SyncStateRecord.fetchOne(db, key: serverName)
    }

    /// The most recent sync run over all servers.
    public func lastSync() throws -> SyncStateRecord? {
        try SyncStateRecord.order(Column("started_at").desc).fetchOne(db)
    }

    // MARK: Audit

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

/// Write access inside one transaction: every change keymgr makes lives here, next to the queries.
public final class StoreWriter: StoreReader {

    /// Inserts or replaces the device row.
    public func save(_ device: DeviceRecord) throws { try device.save(db) }

    /// Inserts the user, or updates the username (when given) and `updatedAt` of an existing one.
    public func upsertUser(userId: String, username: String?, at now: Date) throws {
        if var existing = try user(id: userId) {
            if let username, username != existing.username { existing.username = username }
            existing.updatedAt = now
            try existing.update(db)
        } else {
            try UserRecord(userId: userId, username: username, createdAt: now, updatedAt: now).insert(db)
        }
    }

    public func insert(_ key: UserKeyRecord) throws { try key.insert(db) }

    /// Writes back a changed key row; the row must exist.
    public func update(_ key: UserKeyRecord) throws {
        do { try key.update(db) } catch is RecordError {
            throw StorageError(.notFound, "key \(key.kid) is not in the store")
        }
    }

    public func save(_ pin: AppPINRecord) throws { try pin.save(db) }

    public func deleteAppPIN(kid: String) throws { _ = try AppPINRecord.deleteOne(db, key: kid) }

    /// Adds one to the key's wrong-PIN counter and returns the new count. Callers commit it before checking a guess.
    public func incrementPINFailures(kid: String, at now: Date) throws -> Int {
        try db.execute(sql: "UPDATE app_pins SET failed_attempts = failed_attempts + 1, updated_at = ? WHERE kid = ?",
                       arguments: [Timestamp.string(from: now), kid])
        guard db.changesCount == 1, let count = try Int.fetchOne(db, sql: "SELECT failed_attempts FROM app_pins WHERE kid = ?", arguments: [kid]) else {
            throw StorageError(.notFound, "key \(kid) has no PIN record")
        }
        return count
    }

    public func save(_ server: ServerRecord) throws { try server.save(db) }

    public func save(_ registration: RegistrationRecord) throws { try registration.save(db) }

    public func deleteRegistration(userId: String, serverName: String) throws {
        _ = try RegistrationRecord.deleteOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    /// Deletes every registration of a user; returns how many there were.
    @discardableResult
    public func deleteRegistrations(userId: String) throws -> Int {
        try RegistrationRecord.filter(Column("user_id") == userId).deleteAll(db)
    }

    public func save(_ tokens: TokenRecord) throws { try tokens.save(db) }

    public func deleteTokenSet(userId: String, serverName: String) throws {
        _ = try TokenRecord.deleteOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    /// Deletes every token set (and with it the DPoP keys) of a user; returns how many there were.
    @discardableResult
    public func deleteTokenSets(userId: String) throws -> Int {
        try TokenRecord.filter(Column("user_id") == userId).deleteAll(db)
    }

    public func save(_ state: SyncStateRecord) throws { try state.save(db) }

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
