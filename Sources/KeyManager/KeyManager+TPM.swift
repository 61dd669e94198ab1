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

    /// Inside a write transaction of a TPM store, as its last step: the one step of the rollback counter this write
    /// takes. Holding the store's rollback lock (released by the returned step), reads the counter T and accepts the
    /// value D the MAC'd device row records only when D == T (level) or D == T + 1 (a crash between an earlier
    /// write's commit and its increment); anything behind is a restored copy or lost commits, refused as rolled back.
    /// It records T + 1 in the device row; once the transaction commits, `RollbackStep.advance` increments the
    /// counter to T + 1. Nil for a software store.
    ///
    /// A store one ahead is first repaired: the counter is brought level with it (one more increment, before this
    /// write records anything), so every commit records a value no earlier commit recorded, and a copy of the store
    /// taken while it was one ahead is behind the counter after the next write.
    func stepRollback(_ writer: StoreWriter, _ keys: MasterKeys) throws -> RollbackStep? {
        // Its row MAC checked as it is read (or, in `master rotate`, with every row before this step).
        let device = try Self.requireDevice(writer)
        guard device.keyBackend == KeyBackendKind.tpm.rawValue else { return nil }
        guard let tcti = device.tpmTcti, let index = device.tpmCounterIndex, let storedValue = device.rollbackCounter,
              let index32 = UInt32(exactly: index), let stored = UInt64(exactly: storedValue) else {
            throw Self.tampered("the device settings (a TPM store without its rollback counter)")
        }
        let auth = try tpmSecrets(device, keys.hierarchy).counter
        // Taken before the counter is read: another keymgr between its commit and its increment has a store one
        // ahead that is no crash; its increment must land before this write reads the counter.
        let lock = try RollbackStep.lock(home: store.home.url)
        do {
            let current = try TPMKeyBackend.mapped(tcti, counterIndex: index32) {
                try TPMConnection.with(tcti: tcti) { connection -> UInt64 in
                    let current = try connection.readCounter(index32, auth: auth)
                    // One ahead: an earlier write committed and died before its increment. Repaired here.
                    guard stored == current + 1 else { return current }
                    return try connection.incrementCounter(index32, auth: auth, from: current)
                }
            }
            guard stored == current else {
                if stored > current {
                    // keymgr never leaves a store more than one step ahead: its device row was forged.
                    throw Self.tampered("the device settings (the store's rollback counter is ahead of its TPM's by "
                        + "\(stored - current))")
                }
                throw KeyManagerError(.rolledBack, "this store is older than its TPM's rollback counter (the store says "
                    + "\(stored), the TPM \(current)): it is a restored copy or lost its latest commits, so keymgr will not "
                    + "use it; restore the newest copy of the home, or re-initialise and bind the users again")
            }
            let step = RollbackStep(tcti: tcti, index: index32, auth: auth, value: current + 1, lock: lock)
            try record(step.value, writer, keys)
            return step
        } catch {
            lock.release()
            throw error
        }
    }

    /// Records `value` in the device row (stamped with the transaction's other rows).
    private func record(_ value: UInt64, _ writer: StoreWriter, _ keys: MasterKeys) throws {
        var device = try Self.requireDevice(writer)
        guard let recorded = Int64(exactly: value) else { throw Self.tampered("the device settings (the rollback counter)") }
        device.rollbackCounter = recorded
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
        try appendAuditOnly([auditEvent("tpm.lockoutReset")])
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

/// One write's step of a TPM store's rollback counter: the value the write records in the device row, and the
/// store's rollback lock, held from before the counter is read until it is incremented to that value (or the
/// transaction did not commit). `rollback.lock` in the home: an `flock`, so the kernel releases it when a holder dies.
final class RollbackStep {
    let tcti: String
    let index: UInt32
    let auth: SecretBytes
    /// What the device row records, and what the counter becomes once `advance` ran.
    let value: UInt64
    private let lock: FileLock

    init(tcti: String, index: UInt32, auth: SecretBytes, value: UInt64, lock: FileLock) {
        self.tcti = tcti
        self.index = index
        self.auth = auth
        self.value = value
        self.lock = lock
    }

    /// After the write transaction committed: NV_Increment (the counter becomes `value`; nothing else stepped it
    /// under the lock, so nothing is read back), then the lock goes.
    func advance() throws {
        defer { lock.release() }
        try TPMKeyBackend.mapped(tcti) {
            try TPMConnection.with(tcti: tcti) { _ = try $0.incrementCounter(index, auth: auth, from: value - 1) }
        }
    }

    /// Lets the lock go without a step: the transaction did not commit, so the store is as it was.
    func release() { lock.release() }

    /// The lock file, in the store's home.
    static let fileName = "rollback.lock"

    /// Waits up to 5 s for the store's rollback lock, polling; `busy` after that.
    static func lock(home: URL) throws -> FileLock {
        let path = home.appendingPathComponent(fileName).path
        let lock = try FileLock(path: path) { KeyManagerError(.config, "cannot open the rollback lock \(path): \($0)") }
        let deadline = Date().addingTimeInterval(5)
        while try !lock.tryLock(cannotLock: { KeyManagerError(.failure, "cannot lock the rollback lock \(path): \($0)") }) {
            guard Date() < deadline else {
                lock.release()
                throw KeyManagerError(.busy, "this store is busy: another keymgr has held its rollback lock (\(path)) "
                    + "for 5 s while stepping the TPM counter; try again in a moment")
            }
            usleep(1_000)
        }
        return lock
    }
}
