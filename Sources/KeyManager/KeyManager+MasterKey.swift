import Foundation
import Storage

extension KeyManager {
    /// Replaces the master key: every sealed value (private keys, PIN verifiers, client secrets, registration
    /// tokens, OAuth tokens, DPoP keys, the master-key check) is re-sealed under the new key in ONE transaction.
    ///
    /// The new key is written beside the old as `<file>.next` first and renamed into place after the commit;
    /// `open` finishes a rotation that stopped between the two. A key from systemd's credential store cannot be
    /// rewritten from here.
    /// An exclusive `flock` on `<key file>.lock`, or `busy` when another rotation holds it.
    static func rotationLock(for keyPath: String) throws -> FileLock {
        let path = keyPath + ".lock"
        let lock = try FileLock(path: path) { KeyManagerError(.config, "cannot open \(path) to rotate the master key: \($0)") }
        guard try lock.tryLock(cannotLock: { _ in Self.rotationBusy }) else { throw Self.rotationBusy }
        return lock
    }

    private static var rotationBusy: KeyManagerError {
        KeyManagerError(.busy, "another `keymgr master rotate` is running on this store: run it again when it has finished")
    }

    /// Fails, as `rotateMasterKey` would, when the master key cannot be rotated from here: what `master rotate`
    /// checks before it asks for confirmation.
    public func checkMasterKeyRotatable() throws {
        _ = try rotatableKeyPath()
    }

    /// The master key file a rotation rewrites; `config` for a key systemd holds.
    private func rotatableKeyPath() throws -> String {
        switch masterKeySource {
        case .systemdCredential(let path):
            throw KeyManagerError(.config, "the master key comes from systemd's credential \(path), which keymgr cannot rewrite: "
                + "stop the services, decrypt the credential with `systemd-creds decrypt` to a private file, run "
                + "`KEYMGR_MASTER_KEY_FILE=FILE keymgr master rotate` outside the service, then encrypt FILE back with "
                + "`systemd-creds encrypt --name=keymgr.master` (the steps are in docs/operations.md, \"Rotating a master "
                + "key held by systemd\")")
        case .environmentFile(let path), .home(let path), .tpmSealed(let path):
            return path
        }
    }

    /// Rotates the master key as this extension's first comment says; `config` for a key systemd holds.
    public func rotateMasterKey() throws -> MasterKeyRotation {
        let keyPath = try rotatableKeyPath()
        // One rotation at a time: two would both write `.next`, and the one renamed last could be a key the store
        // was never sealed under. Held until the new key file is in place; the kernel drops it if keymgr dies.
        let lock = try Self.rotationLock(for: keyPath)
        defer { lock.release() }
        let pendingPath = masterKeySource.pending.path
        unlink(pendingPath)
        let newMaster = try SecretBytes.random(count: MasterKey.byteCount)
        if masterKeySource.isTPMSealed, let tcti = masterKeyTCTI {
            // Sealed to the same TPM; until the rename below, `open` takes whichever of the two opens the store.
            try MasterKey.writeSealed(newMaster, tcti: tcti, to: pendingPath)
        } else {
            try MasterKey.writeNew(newMaster, to: pendingPath)
        }
        // The new key's directory entry must be on disk before the store is re-sealed under it.
        MasterKey.syncDirectory(of: pendingPath)
        let keys = masterKeys

        let count: Int
        let nextKeys: MasterKeys
        var step: RollbackStep?
        var appended: [AuditEventRecord] = []
        // Released without a step when the transaction did not commit (`advance` below releases it otherwise).
        defer { step?.release() }
        do {
            let device = try Self.mapped { try store.read { try Self.requireDevice($0) } }
            nextKeys = try MasterKeys(master: newMaster, deviceId: device.deviceId)
            let next = nextKeys.hierarchy
            let nextIntegrity = nextKeys.integrity
            count = try Self.mapped { try store.write(audit: keys.integrity.auditKeys) { writer -> Int in
                // Re-checked inside the transaction: another rotation may have committed since this process loaded its key.
                try requireCurrentMasterKey(writer, keys)
                // Every row and each table's set hold under the old key before anything is re-stamped under the new.
                try writer.verifyRowsOrThrow(keys: keys.integrity.rowKeys)
                // The counter's step is recorded under the old key, then stamped under the new one with the device row.
                step = try stepRollback(writer, keys)
                var rewrapped = 0
                func reseal(_ value: Data?, _ slot: SealedSlot) throws -> Data? {
                    guard let value else { return nil }
                    rewrapped += 1
                    return try next.seal(try openSealed(value, slot), in: slot)
                }
                // Every row MAC was checked under the old key above; the settings in range too before they are
                // re-stamped under the new one: a rotation never blesses a row someone edited.
                var device = try verifiedDevice(writer)
                device.masterKeyCheck = try reseal(device.masterKeyCheck, .masterCheck(deviceId: device.deviceId)) ?? Data()
                device.tpmSecrets = try reseal(device.tpmSecrets, .tpmSecrets(deviceId: device.deviceId))
                try writer.save(device)
                for var key in try writer.keys(statuses: Set(UserKeyRecord.Status.allCases)) {
                    key.wrappedPrivateKey = try reseal(key.wrappedPrivateKey, .privateKey(kid: key.kid, userId: key.userId))
                    try writer.update(key)
                }
                for var pin in try writer.appPINs() {
                    pin = try verified(pin)
                    pin.verifier = try reseal(pin.verifier, .pinVerifier(kid: pin.kid)) ?? Data()
                    try writer.save(pin)
                }
                for var registration in try writer.registrations() {
                    let (user, server) = (registration.userId, registration.serverName)
                    registration.sealedClientSecret = try reseal(registration.sealedClientSecret,
                        .registrationSecret("client_secret", userId: user, serverName: server))
                    registration.sealedRegistrationAccessToken = try reseal(registration.sealedRegistrationAccessToken,
                        .registrationSecret("registration_access_token", userId: user, serverName: server))
                    try writer.save(registration)
                }
                for var tokens in try writer.tokenSets() {
                    let (user, server) = (tokens.userId, tokens.serverName)
                    tokens.sealedAccessToken = try reseal(tokens.sealedAccessToken, .tokenSecret("access_token", userId: user, serverName: server))
                    tokens.sealedRefreshToken = try reseal(tokens.sealedRefreshToken, .tokenSecret("refresh_token", userId: user, serverName: server))
                    tokens.sealedIdToken = try reseal(tokens.sealedIdToken, .tokenSecret("id_token", userId: user, serverName: server))
                    tokens.sealedDpopKey = try reseal(tokens.sealedDpopKey, .tokenSecret("dpop_key", userId: user, serverName: server))
                    try writer.save(tokens)
                }
                try writer.appendAudit(auditEvent("master.rotated", details: ["secretsRewrapped": .int(Int64(rewrapped))]))
                // The old chain is checked, then keyed anew (with its anchor) under the new master key.
                if let bad = try writer.verifyAuditChain(keys: keys.integrity.auditKeys).firstBad {
                    throw KeyManagerError(.tampered, "the audit log is broken at entry \(bad.seq) (\(bad.reason)): "
                        + "nothing was rotated; run `keymgr audit verify` and restore the store from a backup")
                }
                try writer.stampAuditChain(keys: nextIntegrity.auditKeys)
                // Last: every row (the device row with its new counter value included) stamped under the new key.
                try writer.stampAllRows(keys: nextIntegrity.rowKeys)
                appended = writer.appendedAudit
                return rewrapped
            } }
            journal(appended)
        } catch is MasterKeyMoved {
            unlink(pendingPath)
            throw KeyManagerError(.busy, "another `keymgr master rotate` changed the master key meanwhile: nothing was rotated; "
                + "run it again if a further rotation is wanted")
        } catch {
            unlink(pendingPath)
            throw error
        }
        // A keymgr that opened the store meanwhile may have finished the rename itself (see `open`).
        let renamed = rename(pendingPath, keyPath) == 0
            || (errno == ENOENT && (try? MasterKey.load(from: masterKeySource))?.bytes == newMaster)
        guard renamed else {
            throw KeyManagerError(.config, "the store was re-sealed under the new master key, but it could not be moved into place: "
                + "rename \(pendingPath) to \(keyPath) by hand (\(String(cString: strerror(errno))))")
        }
        MasterKey.syncDirectory(of: keyPath)
        replaceMasterKeys(nextKeys)
        try step?.advance()
        return MasterKeyRotation(secretsRewrapped: count)
    }
}
