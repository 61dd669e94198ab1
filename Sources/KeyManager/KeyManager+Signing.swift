import Foundation
import Storage

extension KeyManager {
    /// Signs a challenge with a user's key after verifying the user as its auth type demands, and records
    /// `lastUsedAt` and an audit entry.
    public func sign(_ request: SignRequest, pin: SecretProvider) throws -> SignResult {
        try JOSEClaims.checkCustomClaims(request.claims)
        guard (1...3600).contains(request.expiresIn) else {
            throw KeyManagerError(.usage, "--expires-in must be between 1 and 3600 seconds")
        }
        let selected = try selectKey(userId: request.userId, kid: request.kid, statuses: KeyStatus.usable,
                                     issuer: nil, verb: "sign with")
        let key = selected.key
        let unlocked = try unlock(key, pin: pin, timeout: request.verifierTimeout)
        let challenge = try request.challenge ?? Base64URL.encode(SecureRandom.bytes(count: 32))
        let signedAt = now()
        let jws = try JOSEClaims.signingJWS(kid: key.kid, userId: key.userId, challenge: challenge,
                                            issuer: request.issuer ?? key.issuer, issuedAt: signedAt,
                                            expiresIn: request.expiresIn, custom: request.claims, key: unlocked.privateKey)
        try write { writer in
            guard var current = try writer.key(kid: key.kid), current.status == .active else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) was revoked while signing: bind the user again")
            }
            current.lastUsedAt = signedAt
            try writer.update(current)
            if var pinRecord = unlocked.pinRecord {
                pinRecord.failedAttempts = 0
                pinRecord.updatedAt = signedAt
                try writer.save(pinRecord)
            }
            try writer.appendAudit(auditEvent("key.signed", userId: key.userId, kid: key.kid, details: [
                "claims": .array(request.claims.keys.sorted().map(JSONValue.string)),
            ]))
        }
        return SignResult(kid: key.kid, jws: jws)
    }

    /// A private key opened for use, and the PIN record to reset (with upgraded parameters) once the use commits.
    struct UnlockedKey {
        let privateKey: P256PrivateKey
        let pinRecord: AppPINRecord?
    }

    /// Verifies the user for `key`'s auth type and opens its private key.
    func unlock(_ key: UserKeyRecord, pin: SecretProvider, timeout: TimeInterval) throws -> UnlockedKey {
        guard key.status != .locked else { throw lockedError(key) }
        guard key.status == .active, let sealed = key.wrappedPrivateKey else {
            throw KeyManagerError(.clientNotRegistered, "key \(key.kid) has no key material left: bind the user again")
        }
        let authType = AuthType(key.authType)
        let slot = SealedSlot.privateKey(kid: key.kid, userId: key.userId)
        switch authType {
        case .none:
            return UnlockedKey(privateKey: try P256PrivateKey(rawRepresentation: try openSealed(sealed, slot)), pinRecord: nil)
        case .biometricOnly, .biometricAllowFallback:
            try verification(try device()).verify(authType, userId: key.userId, timeout: timeout)
            return UnlockedKey(privateKey: try P256PrivateKey(rawRepresentation: try openSealed(sealed, slot)), pinRecord: nil)
        case .applicationPIN:
            return try unlockWithPIN(key, sealed: sealed, pin: pin)
        }
    }

    /// One PIN guess: the failure counter is incremented and committed BEFORE the guess is checked, so a process
    /// killed mid-guess still spends an attempt; the key locks at `pinRetry` failures.
    private func unlockWithPIN(_ key: UserKeyRecord, sealed: Data, pin: SecretProvider) throws -> UnlockedKey {
        let guess = try pin()
        let (record, attempts) = try write { writer -> (AppPINRecord, Int) in
            guard let record = try writer.appPIN(kid: key.kid) else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) has lost its PIN record: rebind with `keymgr rebind --user \(key.userId) --auth-type app-pin`")
            }
            if record.failedAttempts >= record.pinRetry {
                try lock(writer, kid: key.kid, attempts: record.failedAttempts)
                return (record, -1)
            }
            return (record, try writer.incrementPINFailures(kid: key.kid, at: now()))
        }
        if attempts < 0 { throw lockedError(key) }

        let derivation = try PINDerivation(pin: guess, salt: [UInt8](record.salt), parameters: Argon2Parameters(record), kid: key.kid)
        let expected = try openSealed(record.verifier, .pinVerifier(kid: key.kid))
        var privateKey: P256PrivateKey?
        if derivation.verifier == expected,
           let inner = try? openSealed(sealed, .privateKey(kid: key.kid, userId: key.userId)),
           let raw = try? AESGCM.open(inner.bytes, key: derivation.wrappingKey,
                                      aad: SealedSlot.pinWrappedPrivateKey(kid: key.kid, userId: key.userId).aad) {
            privateKey = try P256PrivateKey(rawRepresentation: raw)
        }
        guard let privateKey else {
            // The verifier and the PIN layer both depend on the PIN: editing the database cannot skip this.
            let locked = attempts >= record.pinRetry
            try write { writer in
                try writer.appendAudit(auditEvent("pin.failed", userId: key.userId, kid: key.kid,
                                                  details: ["attempt": .int(Int64(attempts))]))
                if locked { try lock(writer, kid: key.kid, attempts: attempts) }
            }
            if locked { throw lockedError(key) }
            let left = record.pinRetry - attempts
            throw KeyManagerError(.unAuthorize, "wrong PIN for user \(key.userId): \(left) attempt\(left == 1 ? "" : "s") left before the key locks")
        }
        let upgraded = try upgradedPINRecord(record, key: key, pin: guess, privateKey: privateKey)
        return UnlockedKey(privateKey: privateKey, pinRecord: upgraded ?? record)
    }

    /// When the store's Argon2 parameters changed since this PIN was set, re-derives with the new ones
    /// (a second KDF, once) and re-wraps the key; nil when nothing changes.
    private func upgradedPINRecord(_ record: AppPINRecord, key: UserKeyRecord, pin: SecretBytes,
                                   privateKey: P256PrivateKey) throws -> AppPINRecord? {
        let current = Argon2Parameters(try device())
        guard current != Argon2Parameters(record) else { return nil }
        let salt = try SecureRandom.bytes(count: PINDerivation.saltLength)
        let derivation = try PINDerivation(pin: pin, salt: salt, parameters: current, kid: key.kid)
        let sealed = try sealPINProtected(privateKey.rawRepresentation, pinKey: derivation.wrappingKey,
                                          kid: key.kid, userId: key.userId)
        var upgraded = record
        upgraded.argon2MemoryKib = current.memoryKiB
        upgraded.argon2Iterations = current.iterations
        upgraded.argon2Parallelism = current.parallelism
        upgraded.salt = Data(salt)
        upgraded.verifier = try hierarchy.seal(derivation.verifier, in: .pinVerifier(kid: key.kid))
        try write { writer in
            guard var row = try writer.key(kid: key.kid), row.status == .active else { return }
            row.wrappedPrivateKey = sealed
            try writer.update(row)
            try writer.save(upgraded)
            try writer.appendAudit(auditEvent("pin.parametersUpgraded", userId: key.userId, kid: key.kid, details: [
                "memoryKiB": .int(Int64(current.memoryKiB)), "iterations": .int(Int64(current.iterations)),
                "parallelism": .int(Int64(current.parallelism)),
            ]))
        }
        return upgraded
    }

    private func lock(_ writer: StoreWriter, kid: String, attempts: Int) throws {
        guard var key = try writer.key(kid: kid), key.status == .active else { return }
        key.status = .locked
        try writer.update(key)
        try writer.appendAudit(auditEvent("key.locked", userId: key.userId, kid: kid,
                                          details: ["failedAttempts": .int(Int64(attempts))]))
    }

    func lockedError(_ key: UserKeyRecord) -> KeyManagerError {
        KeyManagerError(.pinLocked, "key \(key.kid) of user \(key.userId) is locked after too many wrong PINs: "
            + "run `keymgr rebind --user \(key.userId) --auth-type app-pin` to bind a new key")
    }

    /// Opens a master-key-sealed value; a failure here means a damaged row, since the master key was checked at open.
    func openSealed(_ sealed: Data, _ slot: SealedSlot) throws -> SecretBytes {
        do {
            return try hierarchy.open(sealed, in: slot)
        } catch {
            throw KeyManagerError(.failure, "a sealed value (\(slot.purpose)) does not open: the row was altered or moved from another row")
        }
    }
}
