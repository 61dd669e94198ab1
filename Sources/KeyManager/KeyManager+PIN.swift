import Foundation
import Storage

extension KeyManager {
    /// Checks a new PIN against the store's policy (length, block list) before it is confirmed or used, so a
    /// person can choose another at once. Throws `badInput` saying what to choose instead.
    public func checkNewPIN(_ pin: SecretBytes) throws {
        try PINPolicy(minLength: device().pinMinLength).check(pin)
    }

    /// Changes the PIN of an APPLICATION_PIN key: the old PIN unlocks it (a wrong one counts as a failed attempt),
    /// the new one must pass the PIN policy, and the key is re-wrapped under the new PIN with a fresh salt.
    public func changePIN(userId: String, kid: String?, oldPIN: SecretProvider, newPIN: SecretProvider) throws -> UserKey {
        let selected = try selectKey(userId: userId, kid: kid, statuses: KeyStatus.usable, issuer: nil, verb: "change the PIN of")
        let key = selected.key
        guard key.authType == .applicationPIN else {
            throw KeyManagerError(.badInput, "key \(key.kid) uses \(key.authType.rawValue), not an app PIN: "
                + "use `keymgr rebind --user \(key.userId) --auth-type app-pin` to protect it with a PIN")
        }
        let device = try device()
        let unlocked = try unlock(key, pin: oldPIN, timeout: 60)
        let pin = try newPIN()
        try PINPolicy(minLength: device.pinMinLength).check(pin)

        let parameters = Argon2Parameters(device)
        let salt = try SecureRandom.bytes(count: PINDerivation.saltLength)
        let derivation = try PINDerivation(pin: pin, salt: salt, parameters: parameters, kid: key.kid)
        let sealed = try sealPINProtected(unlocked.privateKey.rawRepresentation, pinKey: derivation.wrappingKey,
                                          kid: key.kid, userId: key.userId)
        let changedAt = now()
        let record = AppPINRecord(kid: key.kid, argon2MemoryKib: parameters.memoryKiB,
                                  argon2Iterations: parameters.iterations, argon2Parallelism: parameters.parallelism,
                                  salt: Data(salt), verifier: try hierarchy.seal(derivation.verifier, in: .pinVerifier(kid: key.kid)),
                                  failedAttempts: 0, pinRetry: device.pinRetry, updatedAt: changedAt)
        return try write { writer in
            guard var row = try writer.key(kid: key.kid), row.status == .active else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) was revoked meanwhile: bind the user again")
            }
            row.wrappedPrivateKey = sealed
            try writer.update(row)
            try writer.save(record)
            try writer.appendAudit(auditEvent("pin.changed", userId: row.userId, kid: row.kid))
            return UserKey(row, username: selected.username)
        }
    }
}
