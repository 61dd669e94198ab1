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
    /// At `init --key-backend tpm`: the store's rollback counter (an NV counter with a random authValue), and for a
    /// shared device the TPM's DA parameters and a random lockoutAuth. Both secrets are sealed under the master key.
    /// A TPM whose lockoutAuth is already set (the owner's, or another store's) keeps its DA parameters; the note
    /// says so.
    func setUpTPM(_ options: InitOptions, deviceId: String) throws -> TPMSetUp {
        let tcti = options.tpmTcti
        let counterAuth = try SecureRandom.bytes(count: 32)
        let lockoutAuth = try SecureRandom.bytes(count: 32)
        return try TPMKeyBackend.mapped(tcti) {
            try TPMConnection.with(tcti: tcti) { connection in
                let counter = try connection.defineCounter(auth: SecretBytes(counterAuth))
                var secrets = counterAuth
                var note: String?
                if try connection.lockoutState().lockoutAuthSet {
                    note = "the TPM's lockoutAuth was already set, so keymgr left its DA parameters as they are"
                } else {
                    try connection.setDictionaryAttack(maxTries: options.tpmMaxTries, recoveryTime: options.tpmRecoveryTime,
                                                       lockoutRecovery: 86_400, lockoutAuth: nil)
                    try connection.changeLockoutAuth(from: nil, to: SecretBytes(lockoutAuth))
                    secrets += lockoutAuth
                }
                return TPMSetUp(sealedSecrets: try hierarchy.seal(SecretBytes(secrets), in: .tpmSecrets(deviceId: deviceId)),
                                counterIndex: counter.index, counterValue: counter.value, note: note)
            }
        }
    }

    /// The counter's authValue and, when keymgr holds it, the TPM's lockoutAuth.
    func tpmSecrets(_ device: DeviceRecord, _ hierarchy: KeyHierarchy) throws -> (counter: SecretBytes, lockout: SecretBytes?) {
        guard let sealed = device.tpmSecrets else { throw Self.tampered("the device settings (a TPM store without its TPM secrets)") }
        let bytes: [UInt8]
        do {
            bytes = try hierarchy.open(sealed, in: .tpmSecrets(deviceId: device.deviceId)).bytes
        } catch {
            throw Self.tampered("the sealed TPM secrets")
        }
        guard bytes.count == 32 || bytes.count == 64 else { throw Self.tampered("the sealed TPM secrets") }
        return (SecretBytes(Array(bytes.prefix(32))), bytes.count == 64 ? SecretBytes(Array(bytes.suffix(32))) : nil)
    }

    /// Inside a write transaction of a TPM store: refuses a store behind its TPM's rollback counter (more than the
    /// one step a crash between increment and commit leaves). With `step`, also brings the store one step ahead of
    /// where it was (incrementing the counter on the same connection, unless a crash already did) and records the
    /// value in the device row. Returns what `settleRollbackCounter` needs.
    func checkRollback(_ writer: StoreWriter, _ keys: MasterKeys, step: Bool = false) throws -> RollbackCounter? {
        let device = try Self.requireDevice(writer)
        guard device.keyBackend == KeyBackendKind.tpm.rawValue else { return nil }
        guard keys.integrity.holds(device.integrityMac, try keys.integrity.mac(device)) else {
            throw Self.tampered("the device settings (verifier commands, Argon2 parameters, PIN policy, TPM)")
        }
        guard let tcti = device.tpmTcti, let index = device.tpmCounterIndex, let stored = device.rollbackCounter,
              let index32 = UInt32(exactly: index), stored >= 0 else {
            throw Self.tampered("the device settings (a TPM store without its rollback counter)")
        }
        let auth = try tpmSecrets(device, keys.hierarchy).counter
        let counter = RollbackCounter(tcti: tcti, index: index32, auth: auth)
        let (current, stepped) = try TPMKeyBackend.mapped(tcti) {
            try TPMConnection.with(tcti: tcti) { connection -> (UInt64, UInt64?) in
                let current = try connection.readCounter(index32, auth: auth)
                // Stepped only when the store is level with the counter: a store one step behind (a crash after an
                // increment) records the counter's value instead, so repeated crashes never leave it two behind.
                guard step, UInt64(stored) + 1 >= current, UInt64(stored) <= current else { return (current, nil) }
                // Inside the store's write transaction, the only place this store's counter is ever stepped: nothing
                // steps it between the read and the increment, so its new value needs no second read.
                return (current, UInt64(stored) == current
                    ? try connection.incrementCounter(index32, auth: auth, from: current) : current)
            }
        }
        guard UInt64(stored) + 1 >= current, UInt64(stored) <= current else {
            throw KeyManagerError(.rolledBack, "this store is older than its TPM's rollback counter (the store says "
                + "\(stored), the TPM \(current)): it is a restored copy or lost its latest commits, so keymgr will not "
                + "use it; restore the newest copy of the home, or re-initialise and bind the users again")
        }
        if let stepped { try record(stepped, writer, keys) }
        return counter
    }

    /// Right after a write transaction of a TPM store committed: a second step of the counter, in a transaction of its
    /// own. A copy taken before the commit is then two steps behind (refused), while a crash in either window leaves
    /// the store one step behind (accepted): only a crash, never a restored copy, passes for "one step behind".
    func settleRollbackCounter(_ counter: RollbackCounter, _ keys: MasterKeys) throws {
        try Self.mapped {
            try store.write(audit: keys.integrity.auditKeys, rows: keys.integrity.rowKeys) { writer in
                try advanceRollbackCounter(counter, writer, keys)
            }
        }
    }

    /// Increments the counter and records its value in the MAC'd device row. A crash after the increment leaves the
    /// store one step behind, which `checkRollback` accepts.
    ///
    /// The device row is checked under `keys` BEFORE the increment: an increment that could then not be recorded (a
    /// `master rotate` re-keyed the row meanwhile) would leave the store a step behind, and a second such miss, two
    /// steps: refused as rolled back for good.
    func advanceRollbackCounter(_ counter: RollbackCounter, _ writer: StoreWriter, _ keys: MasterKeys) throws {
        let device = try Self.requireDevice(writer)
        guard keys.integrity.holds(device.integrityMac, try keys.integrity.mac(device)) else {
            throw Self.tampered("the device settings")
        }
        let value = try TPMKeyBackend.mapped(counter.tcti) {
            try TPMConnection.with(tcti: counter.tcti) { try $0.incrementCounter(counter.index, auth: counter.auth) }
        }
        try record(value, writer, keys)
    }

    private func record(_ value: UInt64, _ writer: StoreWriter, _ keys: MasterKeys) throws {
        var device = try Self.requireDevice(writer)
        guard keys.integrity.holds(device.integrityMac, try keys.integrity.mac(device)) else {
            throw Self.tampered("the device settings")
        }
        device.rollbackCounter = Int64(value)
        device.integrityMac = try keys.integrity.mac(device)
        try writer.save(device)
    }

    /// The TPM's DA counter and limits; nil for a software store.
    public func tpmStatus() throws -> TPMStatus? {
        let device = try device()
        guard device.keyBackend == KeyBackendKind.tpm.rawValue, let tcti = device.tpmTcti else { return nil }
        let state = try TPMKeyBackend.mapped(tcti) { try TPMConnection.with(tcti: tcti) { try $0.lockoutState() } }
        return TPMStatus(tcti: tcti, failures: state.failures, maxTries: state.maxTries, recoveryTime: state.recoveryTime,
                         inLockout: state.inLockout, holdsLockoutAuth: try tpmSecrets(device, hierarchy).lockout != nil)
    }

    /// Clears the TPM's DA counter and lockout with the lockoutAuth this store holds (an administrator's act, audited).
    public func resetTPMLockout() throws -> TPMStatus {
        let device = try device()
        guard device.keyBackend == KeyBackendKind.tpm.rawValue, let tcti = device.tpmTcti else {
            throw KeyManagerError(.usage, "this store keeps its keys in software: there is no TPM lockout to reset")
        }
        guard let lockoutAuth = try tpmSecrets(device, hierarchy).lockout else {
            throw KeyManagerError(.config, "this store does not hold the TPM's lockoutAuth (it was set before keymgr's "
                + "init): clear the lockout with `tpm2_dictionarylockout -c` and that lockoutAuth")
        }
        try TPMKeyBackend.mapped(tcti) { try TPMConnection.with(tcti: tcti) { try $0.resetLockout(lockoutAuth: lockoutAuth) } }
        try write { writer in try writer.appendAudit(auditEvent("tpm.lockoutReset")) }
        guard let status = try tpmStatus() else { throw KeyManagerError(.failure, "the TPM status could not be read") }
        return status
    }
}

/// What `init` set up on the TPM.
struct TPMSetUp {
    let sealedSecrets: Data
    let counterIndex: UInt32
    let counterValue: UInt64
    let note: String?
}

/// A TPM store's rollback counter, as one write transaction uses it.
struct RollbackCounter {
    let tcti: String
    let index: UInt32
    let auth: SecretBytes
}
