import Foundation
import GRDB

// The queries of `DeviceRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The device row, or nil before `init`.
    ///
    /// Read by column index, not through `Decodable` (with its snake_case key conversion): every command reads this
    /// row once at start-up, where that conversion cost more than the query.
    public func device() throws -> DeviceRecord? {
        guard let row = try Row.fetchOne(db, sql: """
            SELECT device_id, device_name, os_name, os_version, model, issuer, pin_retry, pin_min_length,
                   argon2_memory_kib, argon2_iterations, argon2_parallelism, biometric_verifier, credential_verifier,
                   master_key_check, created_at, integrity_mac, key_backend, key_backend_reason, tpm_tcti,
                   tpm_secrets, tpm_counter_index, rollback_counter
            FROM device WHERE id = 1
            """) else { return nil }
        var device = DeviceRecord(
            deviceId: try row.decode(atIndex: 0), deviceName: try row.decode(atIndex: 1), osName: try row.decode(atIndex: 2),
            osVersion: try row.decode(atIndex: 3), model: try row.decode(atIndex: 4), issuer: try row.decode(atIndex: 5),
            pinRetry: try row.decode(atIndex: 6), pinMinLength: try row.decode(atIndex: 7),
            argon2MemoryKib: try row.decode(atIndex: 8), argon2Iterations: try row.decode(atIndex: 9),
            argon2Parallelism: try row.decode(atIndex: 10), biometricVerifier: try row.decode(atIndex: 11),
            credentialVerifier: try row.decode(atIndex: 12), masterKeyCheck: try row.decode(atIndex: 13),
            createdAt: try Self.requiredDate(row, 14))
        device.integrityMac = try row.decode(atIndex: 15)
        device.keyBackend = try row.decode(atIndex: 16)
        device.keyBackendReason = try row.decode(atIndex: 17)
        device.tpmTcti = try row.decode(atIndex: 18)
        device.tpmSecrets = try row.decode(atIndex: 19)
        device.tpmCounterIndex = try row.decode(atIndex: 20)
        device.rollbackCounter = try row.decode(atIndex: 21)
        return device
    }
}

extension StoreWriter {
    /// Inserts or replaces the device row.
    public func save(_ device: DeviceRecord) throws { try device.save(db) }
}
