import Foundation
import GRDB

// The queries of `DeviceRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The device row, or nil before `init`.
    ///
    /// Read by column index, not through `Decodable` (with its snake_case key conversion): every command reads this
    /// row once at start-up, where that conversion cost more than the query.
    package func device() throws -> DeviceRecord? { try deviceRow()?.record }

    /// The device row as a record and as read (for checking its row MAC once the master key is known), or nil
    /// before `init`. One statement: the open's proof of the master key reads nothing more.
    package func deviceRow() throws -> (record: DeviceRecord, row: DeviceRowSnapshot)? {
        // Every column, in table order (later migrations only append): the row MAC is over all of them.
        guard let found = try Row.fetchOne(db, sql: "SELECT * FROM device WHERE id = 1") else { return nil }
        let row = try checked(DeviceRecord.databaseTableName, found, rowid: 1)
        var device = DeviceRecord(
            deviceId: try row.decode(atIndex: 1), deviceName: try row.decode(atIndex: 2), osName: try row.decode(atIndex: 3),
            osVersion: try row.decode(atIndex: 4), model: try row.decode(atIndex: 5), issuer: try row.decode(atIndex: 6),
            pinRetry: try row.decode(atIndex: 7), pinMinLength: try row.decode(atIndex: 8),
            argon2MemoryKib: try row.decode(atIndex: 9), argon2Iterations: try row.decode(atIndex: 10),
            argon2Parallelism: try row.decode(atIndex: 11), biometricVerifier: try row.decode(atIndex: 12),
            credentialVerifier: try row.decode(atIndex: 13), masterKeyCheck: try row.decode(atIndex: 14),
            createdAt: try Self.requiredDate(row, 15))
        // The key-backend columns (migration 0004) by name: they follow 0003's row_mac and row_sets.
        device.keyBackend = try row.decode(forColumn: "key_backend")
        device.keyBackendReason = try row.decode(forColumn: "key_backend_reason")
        device.tpmTcti = try row.decode(forColumn: "tpm_tcti")
        device.tpmSecrets = try row.decode(forColumn: "tpm_secrets")
        device.tpmCounterIndex = try row.decode(forColumn: "tpm_counter_index")
        device.rollbackCounter = try row.decode(forColumn: "rollback_counter")
        device.tampering = try row.decode(forColumn: "tampering")
        return (device, DeviceRowSnapshot(row))
    }
}

extension StoreReader {
    /// The user a key row names, read without its MAC checked: whom a tampering finding about that row concerns.
    package func uncheckedOwner(ofKey kid: String) throws -> String? {
        try String.fetchOne(db, sql: "SELECT user_id FROM user_keys WHERE kid = ?", arguments: [kid])
    }
}

extension StoreWriter {
    /// Inserts or replaces the device row.
    package func save(_ device: DeviceRecord) throws { try device.save(db) }
}
