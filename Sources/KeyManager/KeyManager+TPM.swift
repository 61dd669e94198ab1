import Foundation
import Storage

/// The TPM's dictionary-attack state as `keymgr tpm status` shows it.
public struct TPMStatus: Sendable, Equatable {
    public let tcti: String
    public let failures: UInt32
    public let maxTries: UInt32
    public let recoveryTime: UInt32
    public let inLockout: Bool
    /// Whether this store holds the TPM's lockoutAuth (sealed under the master key).
    public let holdsLockoutAuth: Bool
}

extension KeyManager {
    /// At `init --key-backend tpm`: sets the TPM's DA parameters for a shared device and a random lockoutAuth, sealed
    /// under the master key. A TPM whose lockoutAuth is already set (the owner's, or another store's) is left as it
    /// is, and the note says so.
    func takeTPMLockout(_ options: InitOptions, deviceId: String) throws -> (sealed: Data?, note: String?) {
        let tcti = options.tpmTcti
        let lockoutAuth = try SecretBytes(SecureRandom.bytes(count: 32))
        let sealed = try hierarchy.seal(lockoutAuth, in: .tpmLockoutAuth(deviceId: deviceId))
        return try TPMKeyBackend.mapped(tcti) {
            try TPMConnection.with(tcti: tcti) { connection in
                guard !(try connection.lockoutState().lockoutAuthSet) else {
                    return (nil, "the TPM's lockoutAuth was already set, so keymgr left its DA parameters as they are")
                }
                try connection.setDictionaryAttack(maxTries: options.tpmMaxTries, recoveryTime: options.tpmRecoveryTime,
                                                   lockoutRecovery: 86_400, lockoutAuth: nil)
                try connection.changeLockoutAuth(from: nil, to: lockoutAuth)
                return (sealed, nil)
            }
        }
    }

    /// The TPM's DA counter and limits; nil for a software store.
    public func tpmStatus() throws -> TPMStatus? {
        let device = try device()
        guard device.keyBackend == KeyBackendKind.tpm.rawValue, let tcti = device.tpmTcti else { return nil }
        let state = try TPMKeyBackend.mapped(tcti) { try TPMConnection.with(tcti: tcti) { try $0.lockoutState() } }
        return TPMStatus(tcti: tcti, failures: state.failures, maxTries: state.maxTries, recoveryTime: state.recoveryTime,
                         inLockout: state.inLockout, holdsLockoutAuth: device.tpmLockoutAuth != nil)
    }

    /// Clears the TPM's DA counter and lockout with the lockoutAuth this store holds (an administrator's act, audited).
    public func resetTPMLockout() throws -> TPMStatus {
        let device = try device()
        guard device.keyBackend == KeyBackendKind.tpm.rawValue, let tcti = device.tpmTcti else {
            throw KeyManagerError(.usage, "this store keeps its keys in software: there is no TPM lockout to reset")
        }
        guard let sealed = device.tpmLockoutAuth else {
            throw KeyManagerError(.config, "this store does not hold the TPM's lockoutAuth (it was set before keymgr's "
                + "init): clear the lockout with `tpm2_dictionarylockout -c` and that lockoutAuth")
        }
        let lockoutAuth = try openSealed(sealed, .tpmLockoutAuth(deviceId: device.deviceId))
        try TPMKeyBackend.mapped(tcti) { try TPMConnection.with(tcti: tcti) { try $0.resetLockout(lockoutAuth: lockoutAuth) } }
        try write { writer in try writer.appendAudit(auditEvent("tpm.lockoutReset")) }
        guard let status = try tpmStatus() else { throw KeyManagerError(.failure, "the TPM status could not be read") }
        return status
    }
}
