import Foundation
import GRDB

/// The `users` table: the reference server's identity store.
///
/// Passwords are stored in plain text ON PURPOSE: this is a test double that must never hold a real
/// credential, and hashing here would be crypto of our own for no protection worth having.
struct UserRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "users"
    var realm: String
    var username: String
    var password: String
}

/// The `bound_devices` table: one row per device binding record.
struct BoundDeviceRow: Codable, FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "bound_devices"
    /// Insertion order: the paging key, so a deletion between two pages never skips a record.
    var seq: Int64?
    var uuid: String
    var realm: String
    var user: String
    var rev: String
    var deviceId: String
    var deviceName: String
    var createdDate: Int64
    var lastAccessDate: Int64
    var keyJSON: String
    var deviceManagementStatus: Bool

    mutating func didInsert(_ inserted: InsertionSuccess) {
        seq = inserted.rowID
    }

    init(_ device: BoundDevice) {
        seq = nil
        uuid = device.uuid
        realm = device.realmPath
        user = device.user
        rev = device.revision
        deviceId = device.deviceId
        deviceName = device.deviceName
        createdDate = device.createdDate
        lastAccessDate = device.lastAccessDate
        let keyData = (try? JSONEncoder.sorted.encode(device.key)) ?? Data("{}".utf8)
        keyJSON = String(decoding: keyData, as: UTF8.self)
        deviceManagementStatus = device.deviceManagementStatus
    }

    var device: BoundDevice {
        let key = (try? JSONDecoder().decode([String: String].self, from: Data(keyJSON.utf8))) ?? [:]
        return BoundDevice(
            uuid: uuid, realmPath: realm, user: user, revision: rev, deviceId: deviceId,
            deviceName: deviceName, createdDate: createdDate, lastAccessDate: lastAccessDate, key: key,
            deviceManagementStatus: deviceManagementStatus)
    }
}

extension JSONEncoder {
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

/// One page of a user's device records.
struct DevicePage: Sendable {
    var devices: [BoundDevice]
    /// The `seq` of the last record returned, when more records follow.
    var nextAfter: Int64?
}

/// The reference server's own SQLite file. Its schema is created here in code: it is the server's
/// private store, unrelated to keymgr's migrations.
struct Store: Sendable {
    let database: DatabaseQueue

    init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        try self.init(database: try DatabaseQueue(path: path, configuration: configuration))
    }

    /// A database in memory: a tenant's, gone with the server.
    init(inMemory: Void) throws {
        try self.init(database: try DatabaseQueue(configuration: Configuration()))
    }

    private init(database: DatabaseQueue) throws {
        self.database = database
        try database.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS users (
                        realm TEXT NOT NULL,
                        username TEXT NOT NULL,
                        password TEXT NOT NULL,
                        PRIMARY KEY (realm, username)
                    );
                    CREATE TABLE IF NOT EXISTS bound_devices (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        uuid TEXT NOT NULL UNIQUE,
                        realm TEXT NOT NULL,
                        user TEXT NOT NULL,
                        rev TEXT NOT NULL,
                        deviceId TEXT NOT NULL,
                        deviceName TEXT NOT NULL,
                        createdDate INTEGER NOT NULL,
                        lastAccessDate INTEGER NOT NULL,
                        keyJSON TEXT NOT NULL,
                        deviceManagementStatus INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX IF NOT EXISTS bound_devices_by_user ON bound_devices (realm, user, seq);
                    """)
        }
    }

    // MARK: users

    func upsertUser(realm: String, username: String, password: String) async throws {
        try await database.write { db in
            try UserRow(realm: realm, username: username, password: password).upsert(db)
        }
    }

    func password(realm: String, username: String) async throws -> String? {
        try await database.read { db in
            try UserRow.fetchOne(db, key: ["realm": realm, "username": username])?.password
        }
    }

    func users() async throws -> [ReferenceUser] {
        try await database.read { db in
            try UserRow.order(Column("realm"), Column("username")).fetchAll(db)
                .map { ReferenceUser(realmPath: $0.realm, username: $0.username) }
        }
    }

    // MARK: devices

    /// Inserts a new record; returns false when a record with the same uuid exists.
    func insert(_ device: BoundDevice) async throws -> Bool {
        try await database.write { db in
            if try BoundDeviceRow.filter(Column("uuid") == device.uuid).fetchCount(db) > 0 { return false }
            var row = BoundDeviceRow(device)
            try row.insert(db)
            return true
        }
    }

    /// A page of the user's records in insertion order, after `after` (exclusive).
    func page(realm: String, user: String, after: Int64?, limit: Int?) async throws -> DevicePage {
        try await database.read { db in
            var request = BoundDeviceRow
                .filter(Column("realm") == realm && Column("user") == user)
                .order(Column("seq"))
            if let after { request = request.filter(Column("seq") > after) }
            guard let limit else {
                return DevicePage(devices: try request.fetchAll(db).map(\.device), nextAfter: nil)
            }
            let rows = try request.limit(limit + 1).fetchAll(db)
            let page = Array(rows.prefix(limit))
            let more = rows.count > limit
            return DevicePage(devices: page.map(\.device), nextAfter: more ? page.last?.seq : nil)
        }
    }

    func device(realm: String, user: String, uuid: String) async throws -> BoundDevice? {
        try await database.read { db in
            try BoundDeviceRow
                .filter(Column("realm") == realm && Column("user") == user && Column("uuid") == uuid)
                .fetchOne(db)?.device
        }
    }

    /// Every record, in insertion order.
    func allDevices() async throws -> [BoundDevice] {
        try await database.read { db in
            try BoundDeviceRow.order(Column("seq")).fetchAll(db).map(\.device)
        }
    }

    /// Applies `change` to the record and gives it a new revision; nil when no such record.
    func update(
        realm: String?, user: String?, uuid: String, _ change: @escaping @Sendable (inout BoundDevice) -> Void
    ) async throws -> BoundDevice? {
        try await database.write { db in
            var request = BoundDeviceRow.filter(Column("uuid") == uuid)
            if let realm { request = request.filter(Column("realm") == realm) }
            if let user { request = request.filter(Column("user") == user) }
            guard var row = try request.fetchOne(db) else { return nil }
            var device = row.device
            change(&device)
            device.revision = BoundDevice.newRevision()
            let seq = row.seq
            row = BoundDeviceRow(device)
            row.seq = seq
            try row.update(db)
            return device
        }
    }

    /// Deletes the record; returns it, or nil when there was none. `realm`/`user` nil match any.
    func delete(realm: String?, user: String?, uuid: String) async throws -> BoundDevice? {
        try await database.write { db in
            var request = BoundDeviceRow.filter(Column("uuid") == uuid)
            if let realm { request = request.filter(Column("realm") == realm) }
            if let user { request = request.filter(Column("user") == user) }
            guard let row = try request.fetchOne(db) else { return nil }
            _ = try row.delete(db)
            return row.device
        }
    }
}
