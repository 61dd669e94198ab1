import Foundation
import GRDB

/// The one device this store lives on, and the store's settings.
public struct DeviceRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "device"

    public var id: Int = 1
    /// Random and stable: the `deviceId` the server sees for every binding from this device.
    public var deviceId: String
    public var deviceName: String
    public var osName: String
    public var osVersion: String
    public var model: String
    /// The default `iss` of binding and signing JWS.
    public var issuer: String
    /// Wrong PINs before a key locks.
    public var pinRetry: Int
    public var pinMinLength: Int
    public var argon2MemoryKib: Int
    public var argon2Iterations: Int
    public var argon2Parallelism: Int
    /// JSON array: the biometric verifier command's argv, or nil when none is configured.
    public var biometricVerifier: String?
    /// JSON array: the device-credential verifier command's argv, or nil when none is configured.
    public var credentialVerifier: String?
    /// A sealed known value: opening it proves the master key is the right one.
    public var masterKeyCheck: Data
    public var createdAt: Date
    /// HMAC under a master-derived key over the fields that gate access (nil only before a legacy store is stamped).
    public var integrityMac: Data?
    /// Where new keys live: `software` or `tpm` (chosen at init).
    public var keyBackend: String = "software"
    /// Why init chose `keyBackend`, for `status`.
    public var keyBackendReason: String?
    /// The TCTI of the store's TPM, pinned at init.
    public var tpmTcti: String?
    /// Sealed under the master key: the rollback counter's authValue, then the TPM's lockoutAuth when keymgr holds it.
    public var tpmSecrets: Data?
    /// The NV index of the store's TPM rollback counter.
    public var tpmCounterIndex: Int64?
    /// The counter's value the last commit saw.
    public var rollbackCounter: Int64?

    public init(deviceId: String, deviceName: String, osName: String, osVersion: String, model: String,
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
