import Foundation
import Storage

/// A TPM store whose TPM was cleared or replaced (issue 36): the TPM at the store's TCTI answers, but the store's
/// rollback counter is not defined on it. Every key that lived in the old TPM is gone with it; they are not
/// `tampered`, they are unusable, and `keymgr tpm recover` revokes them so that their people bind again.
public struct TPMReplacement: Sendable, Equatable {
    /// The TCTI the store is pinned to.
    public let tcti: String
    /// The store's rollback counter, missing from the TPM at `tcti`.
    public let counterIndex: UInt32
    /// The usable (active or locked) TPM keys, of the users the caller may see, that cannot be used any more.
    public let unusableKeys: [UnusableKey]

    /// Why the keys are unusable, in words (no command named).
    public var why: String {
        String(format: "the TPM at %@ was cleared or replaced (this store's rollback counter 0x%08x is not on it)", tcti,
               counterIndex)
    }
}

/// A key that cannot be used, and why.
public struct UnusableKey: Sendable, Equatable {
    public let kid: String
    public let userId: String
    public let reason: String
}

/// What `keymgr tpm recover` did.
public struct TPMRecovery: Sendable, Equatable {
    public let tcti: String
    public let oldCounterIndex: UInt32
    public let newCounterIndex: UInt32
    /// The keys it revoked (kid, user, the reason recorded).
    public let revoked: [UnusableKey]
    /// Set when the new TPM's lockoutAuth was already set, so its DA parameters were left as they were.
    public let note: String?
}

extension KeyManager {
    /// The reason recorded on each key `tpm recover` revokes; `sign` and `rebind` then say to bind again.
    static let tpmReplacedReason = "the TPM it lived in was cleared or replaced"

    /// Whether this store's TPM was cleared or replaced: nil for a software store and for a TPM that still holds the
    /// store's rollback counter. Sends the TPM NV_ReadPublic only (nothing dictionary-attack protected, nothing
    /// written), so `status` and `doctor` may ask it. Throws when the TPM does not answer.
    public func tpmReplacement() throws -> TPMReplacement? {
        let device = try device()
        guard device.keyBackend == KeyBackendKind.tpm.rawValue, let tcti = device.tpmTcti,
              let index = device.tpmCounterIndex.flatMap({ UInt32(exactly: $0) }) else { return nil }
        let defined = try TPMKeyBackend.mapped(tcti) { try TPMConnection.with(tcti: tcti) { try $0.nvIndexDefined(index) } }
        guard !defined else { return nil }
        let visible = try usersInScope()
        let keys = try read { reader in
            try reader.keys(statuses: [.active, .locked]).filter {
                $0.keyBackend == KeyBackendKind.tpm.rawValue && (visible?.contains($0.userId) ?? true)
            }
        }
        let replacement = TPMReplacement(tcti: tcti, counterIndex: index, unusableKeys: [])
        return TPMReplacement(tcti: tcti, counterIndex: index, unusableKeys: keys.map {
            UnusableKey(kid: $0.kid, userId: $0.userId, reason: replacement.why)
        })
    }

    /// The error for a key that will not load on a TPM that no longer holds the store's rollback counter `index`:
    /// not tampering, a TPM cleared or replaced. Nil when the counter is there (the blob is then really not this
    /// TPM's) or the TPM cannot be asked.
    /// `limitedScope`: the request's scope is a person's (`TPMKeyBackend.limitedScope`).
    static func replacedTPMError(tcti: String, counterIndex index: UInt32, limitedScope: Bool) -> KeyManagerError? {
        guard (try? TPMConnection.with(tcti: tcti) { try $0.nvIndexDefined(index) }) == false else { return nil }
        let why = TPMReplacement(tcti: tcti, counterIndex: index, unusableKeys: []).why
        let next = limitedScope
            ? "ask an administrator to recover the TPM, then bind your key again"
            : "run `keymgr tpm recover` (it revokes the keys that were in the old TPM), then bind their users again"
        return KeyManagerError(.config, "this key cannot be used: \(why), and the keys it held are gone with it; \(next)")
    }

    /// `keymgr tpm recover`: takes the TPM now at the store's TCTI into use after the old one was cleared or replaced.
    /// Refused when the TPM still holds the store's rollback counter (nothing to recover). Otherwise: a new rollback
    /// counter on the new TPM (and, when its lockoutAuth is not set, keymgr's DA parameters and a new lockoutAuth),
    /// and in one transaction every usable TPM key revoked with a reason, the device row pointed at the new counter,
    /// and the act audited (`tpm.recovered`). Needs the master key: an administrator's act.
    public func recoverTPM(maxTries: UInt32, recoveryTime: UInt32) throws -> TPMRecovery {
        let device = try device()
        guard device.keyBackend == KeyBackendKind.tpm.rawValue, let tcti = device.tpmTcti else {
            throw KeyManagerError(.usage, "this store keeps its keys in software: there is no TPM to recover")
        }
        guard let replacement = try tpmReplacement() else {
            throw KeyManagerError(.usage, "the TPM at \(tcti) still holds this store's rollback counter: it was not "
                + "cleared or replaced, so there is nothing to recover (`keymgr doctor` says what is wrong)")
        }
        let lock = try RollbackStep.lock(home: store.home.url)
        defer { lock.release() }
        let counterAuth = try SecureRandom.bytes(count: 32)
        let lockoutAuth = try SecureRandom.bytes(count: 32)
        let (counter, setLockout) = try TPMKeyBackend.mapped(tcti) {
            try TPMConnection.with(tcti: tcti) { connection -> ((index: UInt32, value: UInt64), Bool) in
                let counter = try connection.defineCounter(auth: SecretBytes(counterAuth))
                guard try !connection.lockoutState().lockoutAuthSet else { return (counter, false) }
                try connection.setDictionaryAttack(maxTries: maxTries, recoveryTime: recoveryTime,
                                                   lockoutRecovery: 86_400, lockoutAuth: nil)
                try connection.changeLockoutAuth(from: nil, to: SecretBytes(lockoutAuth))
                return (counter, true)
            }
        }
        let at = now()
        let reason = Self.tpmReplacedReason + String(format: " (its rollback counter 0x%08x was gone)", replacement.counterIndex)
        let revoked = try write(steppingRollback: false) { writer -> [UnusableKey] in
            var current = try Self.requireDevice(writer)
            guard current.tpmCounterIndex == device.tpmCounterIndex, current.tpmTcti == tcti else {
                throw KeyManagerError(.busy, "the store's TPM settings changed while recovering: try again")
            }
            var revoked: [UnusableKey] = []
            for var key in try writer.keys(statuses: [.active, .locked]) where key.keyBackend == KeyBackendKind.tpm.rawValue {
                destroy(&key, status: .revoked, reason: reason, at: at)
                try writer.update(key)
                try writer.deleteAppPIN(kid: key.kid)
                try writer.appendAudit(auditEvent("key.revoked", userId: key.userId, kid: key.kid,
                                                  details: ["reason": .string(reason)]))
                revoked.append(UnusableKey(kid: key.kid, userId: key.userId, reason: reason))
            }
            let secrets = setLockout ? counterAuth + lockoutAuth : counterAuth
            current.tpmSecrets = try hierarchy.seal(SecretBytes(secrets), in: .tpmSecrets(deviceId: current.deviceId))
            current.tpmCounterIndex = Int64(counter.index)
            guard let value = Int64(exactly: counter.value) else { throw Self.tampered("the new TPM's rollback counter") }
            current.rollbackCounter = value
            try writer.save(current)
            try writer.appendAudit(auditEvent("tpm.recovered", details: [
                "tcti": .string(tcti),
                "oldCounterIndex": .string(String(format: "0x%08x", replacement.counterIndex)),
                "newCounterIndex": .string(String(format: "0x%08x", counter.index)),
                "revokedKeys": .int(Int64(revoked.count)),
            ]))
            return revoked
        }
        store.checkpointDestroyedData()
        return TPMRecovery(tcti: tcti, oldCounterIndex: replacement.counterIndex, newCounterIndex: counter.index,
                           revoked: revoked,
                           note: setLockout ? nil : "the new TPM's lockoutAuth was already set, so keymgr left its DA "
                            + "parameters as they are and holds no lockoutAuth for it")
    }
}
