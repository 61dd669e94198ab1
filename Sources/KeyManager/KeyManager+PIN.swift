import Foundation
import Storage

extension KeyManager {
    /// Checks a new PIN against the store's policy (length, block list) before it is confirmed or used, so a
    /// person can choose another at once. Throws `badInput` saying what to choose instead.
    public func checkNewPIN(_ pin: SecretBytes) throws {
        try PINPolicy(minLength: device().pinMinLength).check(pin)
    }

    /// Changes the PIN of an APPLICATION_PIN key. The new PIN must pass the PIN policy first (a weak new PIN costs no
    /// attempt); then the old PIN unlocks the key (only a wrong old PIN counts as a failed attempt), and the key is
    /// re-wrapped under the new PIN with a fresh salt.
    public func changePIN(userId: String, kid: String?, oldPIN: SecretProvider, newPIN: SecretProvider) throws -> UserKey {
        let selected = try selectKey(userId: userId, kid: kid, statuses: KeyStatus.usable, issuer: nil, verb: "change the PIN of")
        let key = selected.key
        guard key.authType == .applicationPIN else {
            throw KeyManagerError(.badInput, "key \(key.kid) uses \(key.authType.rawValue), not an app PIN: "
                + "use `keymgr rebind --user \(key.userId) --auth-type app-pin` to protect it with a PIN")
        }
        let device = try device()
        let old = try oldPIN()
        let pin = try newPIN()
        try PINPolicy(minLength: device.pinMinLength).check(pin)
        let unlocked = try unlock(key, pin: { old }, timeout: 60)
        guard let opened = unlocked.pin else {
            throw KeyManagerError(.clientNotRegistered, "key \(key.kid) has no PIN record: bind the user again")
        }

        let parameters = Argon2Parameters(device)
        let salt = try SecureRandom.bytes(count: PINDerivation.saltLength)
        let derivation = try PINDerivation(pin: pin, salt: salt, parameters: parameters, kid: key.kid)
        let backend = try self.backend(for: key, device: device)
        let material = try backend.changeAuth(opened.material, pinAuth: opened.tpmAuth, newPinAuth: derivation.tpmAuth)
        let layer = try pinLayerMaterial(material, backend: backend, derivation: derivation, kid: key.kid, userId: key.userId)
        let inner = layer.inner
        let changedAt = now()
        return try write { writer in
            guard var row = try writer.key(kid: key.kid), row.status == .active else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) was revoked meanwhile: bind the user again")
            }
            guard let current = try writer.appPIN(kid: key.kid), try verified(current).salt == opened.salt else {
                throw KeyManagerError(.busy, "the PIN of key \(key.kid) changed while this change ran: nothing was changed; "
                    + "run `keymgr pin change` again with the PIN that is now set")
            }
            // Sealed here, inside the transaction, under the master key the store holds now.
            row.wrappedPrivateKey = try hierarchy.seal(SecretBytes(inner), in: .privateKey(kid: key.kid, userId: key.userId))
            try writer.update(row)
            let record = AppPINRecord(kid: key.kid, argon2MemoryKib: parameters.memoryKiB,
                                      argon2Iterations: parameters.iterations, argon2Parallelism: parameters.parallelism,
                                      salt: Data(salt), verifier: try hierarchy.seal(layer.verifier, in: .pinVerifier(kid: key.kid)),
                                      failedAttempts: 0, pinRetry: device.pinRetry, updatedAt: changedAt)
            try writer.save(record)
            try writer.appendAudit(auditEvent("pin.changed", userId: row.userId, kid: row.kid))
            return UserKey(row, username: selected.username)
        }
    }
}
