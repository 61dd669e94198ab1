import Foundation
import GRDB

/// The one device this store lives on, and the store's settings.
package struct DeviceRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "device"

    package var id: Int = 1
    /// Random and stable: the `deviceId` the server sees for every binding from this device.
    package var deviceId: String
    package var deviceName: String
    package var osName: String
    package var osVersion: String
    package var model: String
    /// The default `iss` of binding and signing JWS.
    package var issuer: String
    /// Wrong PINs before a key locks.
    package var pinRetry: Int
    package var pinMinLength: Int
    package var argon2MemoryKib: Int
    package var argon2Iterations: Int
    package var argon2Parallelism: Int
    /// JSON array: the biometric verifier command's argv, or nil when none is configured.
    package var biometricVerifier: String?
    /// JSON array: the device-credential verifier command's argv, or nil when none is configured.
    package var credentialVerifier: String?
    /// A sealed known value: opening it proves the master key is the right one.
    package var masterKeyCheck: Data
    package var createdAt: Date
    /// Where new keys live: `software` or `tpm` (chosen at init).
    package var keyBackend: String = "software"
    /// Why init chose `keyBackend`, for `status`.
    package var keyBackendReason: String?
    /// The TCTI of the store's TPM, pinned at init.
    package var tpmTcti: String?
    /// Sealed under the master key: the rollback counter's authValue, then the TPM's lockoutAuth when keymgr holds it.
    package var tpmSecrets: Data?
    /// The NV index of the store's TPM rollback counter.
    package var tpmCounterIndex: Int64?
    /// The counter's value the last commit saw.
    package var rollbackCounter: Int64?
    /// The first tampering a command found, as JSON `{"what","at","userId"}` (migration 0008); nil when none is
    /// recorded, or an administrator cleared it.
    package var tampering: String?

    package init(deviceId: String, deviceName: String, osName: String, osVersion: String, model: String,
                issuer: String, pinRetry: Int, pinMinLength: Int,
                argon2MemoryKib: Int, argon2Iterations: Int, argon2Parallelism: Int,
                biometricVerifier: String?, credentialVerifier: String?, masterKeyCheck: Data, createdAt: Date) {
        self.deviceId = deviceId
        self.deviceName = deviceName
        self.osName = osName
        self.osVersion = osVersion
        self.model = model
        self.issuer = issuer
        self.pinRetry = pinRetry
        self.pinMinLength = pinMinLength
        self.argon2MemoryKib = argon2MemoryKib
        self.argon2Iterations = argon2Iterations
        self.argon2Parallelism = argon2Parallelism
        self.biometricVerifier = biometricVerifier
        self.credentialVerifier = credentialVerifier
        self.masterKeyCheck = masterKeyCheck
        self.createdAt = createdAt
    }
}
