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
        try writeWithDevice { writer, device in
            // The signature leaves only if this commits: a recorded tampering finding for the user stops it here.
            try refuseIfTampered(device, userId: key.userId)
            // Only what this use changes is written: a PIN changed or a key re-sealed meanwhile is never undone.
            guard try writer.key(kid: key.kid) != nil, try writer.markUsed(kid: key.kid, at: signedAt) else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) was revoked while signing: bind the user again")
            }
            if let unlockedPIN = unlocked.pin { try settle(unlockedPIN, key: key, writer: writer, at: signedAt) }
            try writer.appendAudit(auditEvent("key.signed", userId: key.userId, kid: key.kid, details: [
                "claims": .array(request.claims.keys.sorted().map(JSONValue.string)),
            ]))
        }
        return SignResult(kid: key.kid, jws: jws)
    }

    /// A private key opened for use, and what its PIN unlock leaves to do once the use commits.
    struct UnlockedKey {
        let privateKey: any ES256Signer
        let pin: UnlockedPIN?
    }

    /// The PIN record a right PIN opened (known by its salt), and its re-derivation with the store's higher Argon2
    /// cost when the record was made with a lower one.
    struct UnlockedPIN {
        let salt: Data
        let upgrade: PINUpgrade?
        /// The key's material as the PIN opened it (software: the scalar; TPM: the blob) and the PIN's TPM
        /// authValue, for a PIN change.
        let material: SecretBytes
        let tpmAuth: SecretBytes
    }

    /// A PIN record re-derived under new Argon2 parameters: the inner (PIN) layer is done; the master-key layer and
    /// the verifier are sealed inside the transaction that stores them.
    struct PINUpgrade {
        let parameters: Argon2Parameters
        let salt: [UInt8]
        let verifier: SecretBytes
        let innerSealed: [UInt8]
    }

    /// After a successful unlock, inside the use's transaction: resets the failure counter and applies a cost upgrade,
    /// but only while the PIN record is still the one the PIN opened (same salt); a PIN changed meanwhile stays.
    func settle(_ unlocked: UnlockedPIN, key: UserKeyRecord, writer: StoreWriter, at: Date) throws {
        guard let stored = try writer.appPIN(kid: key.kid), stored.salt == unlocked.salt else { return }
        var record = try verified(stored)
        if let upgrade = unlocked.upgrade, var row = try writer.key(kid: key.kid), row.status == .active {
            row.wrappedPrivateKey = try hierarchy.seal(SecretBytes(upgrade.innerSealed),
                                                       in: .privateKey(kid: key.kid, userId: key.userId))
            try writer.update(row)
            record.argon2MemoryKib = upgrade.parameters.memoryKiB
            record.argon2Iterations = upgrade.parameters.iterations
            record.argon2Parallelism = upgrade.parameters.parallelism
            record.salt = Data(upgrade.salt)
            record.verifier = try hierarchy.seal(upgrade.verifier, in: .pinVerifier(kid: key.kid))
            record.failedAttempts = 0
            record.updatedAt = at
            try writer.save(record)
            try writer.appendAudit(auditEvent("pin.parametersUpgraded", userId: key.userId, kid: key.kid, details: [
                "memoryKiB": .int(Int64(upgrade.parameters.memoryKiB)), "iterations": .int(Int64(upgrade.parameters.iterations)),
                "parallelism": .int(Int64(upgrade.parameters.parallelism)),
            ]))
            return
        }
        guard record.failedAttempts != 0 else { return }
        record.failedAttempts = 0
        try writer.setPINFailures(kid: key.kid, salt: record.salt, count: 0, at: at)
    }

    /// Verifies the user for `key`'s auth type and opens its private key.
    func unlock(_ key: UserKeyRecord, pin: SecretProvider, timeout: TimeInterval) throws -> UnlockedKey {
        guard key.status != .locked else { throw lockedError(key) }
        guard key.status == .active, key.wrappedPrivateKey != nil else {
            throw KeyManagerError(.clientNotRegistered, "key \(key.kid) has no key material left: bind the user again")
        }
        let authType = AuthType(key.authType)
        switch authType {
        case .none:
            break
        case .biometricOnly, .biometricAllowFallback:
            try verification(try device()).verify(authType, userId: key.userId, timeout: timeout)
        case .applicationPIN:
            return try unlockWithPIN(key, pin: pin)
        }
        // The selected row was read and its MAC checked under the master key this process holds: a software key opens
        // from it with no second read. (Whether it is still active is checked again in the use's transaction.)
        if key.keyBackend == KeyBackendKind.software.rawValue, let sealed = key.wrappedPrivateKey,
           let material = try? openSealed(sealed, .privateKey(kid: key.kid, userId: key.userId)) {
            return UnlockedKey(privateKey: try SoftwareKeyBackend().signer(for: material, pinAuth: nil), pin: nil)
        }
        // Else (a TPM key, or a rotation ran meanwhile) re-read in one snapshot with the master key that opens it.
        let (backend, material) = try read { reader -> (any KeyBackend, SecretBytes) in
            guard let row = try reader.key(kid: key.kid), row.status == .active, let sealed = row.wrappedPrivateKey,
                  row.authType == key.authType else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) was revoked or changed while unlocking: try again")
            }
            return (try self.backend(for: row, device: try verifiedDevice(reader)),
                    try openSealed(sealed, .privateKey(kid: key.kid, userId: key.userId)))
        }
        return UnlockedKey(privateKey: try backend.signer(for: material, pinAuth: nil), pin: nil)
    }

    /// One PIN guess. Everything that needs only the master key (the MACs of the key row and the PIN record, both
    /// sealed layers) is checked first, so tampering is reported as `tampered` and spends no attempt. Then the failure
    /// counter is incremented and committed BEFORE the guess is checked, so a process killed mid-guess still spends
    /// an attempt; the key locks at `pinRetry` failures.
    private func unlockWithPIN(_ key: UserKeyRecord, pin: SecretProvider) throws -> UnlockedKey {
        let guess = try pin()
        // No PIN the policy accepts is this long: refused before the counter, so it spends no attempt.
        guard guess.count <= Self.maxSecretInputBytes else {
            throw KeyManagerError(.badInput, "the PIN is longer than \(Self.maxSecretInputBytes) bytes: no PIN is that long; "
                + "nothing was tried and no attempt was spent")
        }
        struct Guess {
            let record: AppPINRecord
            let expected: SecretBytes
            let inner: SecretBytes
            let attempts: Int
            let backend: String
            /// The device row as the transaction read it: its Argon2 cost (a record made cheaper is upgraded) and,
            /// for a TPM key, its TPM.
            let device: DeviceRecord
            /// The guess as the caller's throttle counted it (another person's key through the agent).
            let throttle: PINThrottle.Mark?
        }
        let throttled = try throttledCaller(forKeyOf: key.userId)
        let outcome = try write { writer -> Guess? in
            guard let row = try writer.key(kid: key.kid) else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) was removed: bind the user again")
            }
            if row.status == .locked { return nil }
            guard row.status == .active, row.authType == .applicationPIN, let sealed = row.wrappedPrivateKey else {
                throw KeyManagerError(.clientNotRegistered, "key \(key.kid) was revoked or changed while unlocking: bind the user again")
            }
            // keymgr never leaves a usable PIN key without its record (the set of rows is committed): it was deleted.
            guard let stored = try writer.appPIN(kid: key.kid) else {
                throw Self.tampered("the PIN record of key \(key.kid) (it was deleted)")
            }
            var record = try verified(stored)
            let expected = try openSealed(record.verifier, .pinVerifier(kid: key.kid))
            let inner = try openSealed(sealed, .privateKey(kid: key.kid, userId: key.userId))
            if record.failedAttempts >= record.pinRetry {
                try lock(writer, kid: key.kid, attempts: record.failedAttempts)
                return nil
            }
            // A blocked caller is refused here, and the whole transaction with it: no attempt of the key is spent.
            let throttle = try throttled.map { try countThrottledGuess(writer, caller: $0, at: now()) }
            record.failedAttempts += 1
            try writer.setPINFailures(kid: key.kid, salt: record.salt, count: record.failedAttempts, at: now())
            return Guess(record: record, expected: expected, inner: inner, attempts: record.failedAttempts,
                         backend: row.keyBackend, device: try verifiedDevice(writer), throttle: throttle)
        }
        guard let outcome else { throw lockedError(key) }
        let record = outcome.record

        let derivation = try PINDerivation(pin: guess, salt: [UInt8](record.salt), parameters: Argon2Parameters(record), kid: key.kid)
        let wrongPIN = { () throws -> KeyManagerError in
            let locked = outcome.attempts >= record.pinRetry
            try self.write { writer in
                try writer.appendAudit(self.auditEvent("pin.failed", userId: key.userId, kid: key.kid,
                                                       details: ["attempt": .int(Int64(outcome.attempts))]))
                if locked { try self.lock(writer, kid: key.kid, attempts: outcome.attempts) }
                if let until = outcome.throttle?.startedBlock, let caller = throttled {
                    try writer.appendAudit(self.auditEvent("pin.throttled", details: [
                        "uid": .int(Int64(caller.uid)), "until": .string(Timestamp.string(from: until)),
                    ]))
                }
            }
            if locked { return self.lockedError(key) }
            let left = record.pinRetry - outcome.attempts
            let blocked = outcome.throttle?.startedBlock.map {
                "; this account's next PIN attempt on another person's key waits until \(Timestamp.string(from: $0))"
            } ?? ""
            return KeyManagerError(.unAuthorize, "wrong PIN for user \(key.userId): \(left) attempt\(left == 1 ? "" : "s") left before the key locks" + blocked)
        }
        if outcome.backend != KeyBackendKind.software.rawValue {
            // A TPM key keeps no verifier: the TPM checks the PIN's authValue (and counts a wrong one toward its
            // dictionary-attack lockout, the backstop when keymgr's own counter was rolled back).
            let backend = try self.backend(for: key, device: outcome.device)
            do {
                let signer = try backend.signer(for: outcome.inner, pinAuth: derivation.tpmAuth)
                if let mark = outcome.throttle { try settleThrottledGuess(mark, at: now()) }
                return UnlockedKey(privateKey: signer, pin: UnlockedPIN(salt: record.salt, upgrade: nil,
                                                                        material: outcome.inner, tpmAuth: derivation.tpmAuth))
            } catch is TPMWrongAuth {
                throw try wrongPIN()
            }
        }
        guard derivation.verifier == outcome.expected else { throw try wrongPIN() }
        // The PIN is right (the peppered verifier matched): if its layer does not open, the sealed key was swapped.
        guard let raw = try? AESGCM.open(outcome.inner.bytes, key: derivation.wrappingKey,
                                         aad: SealedSlot.pinWrappedPrivateKey(kid: key.kid, userId: key.userId).aad) else {
            try write { writer in
                try settle(UnlockedPIN(salt: record.salt, upgrade: nil, material: SecretBytes([]), tpmAuth: SecretBytes([])),
                           key: key, writer: writer, at: now())
            }
            throw Self.tampered("the sealed private key of key \(key.kid)")
        }
        let privateKey = try P256PrivateKey(rawRepresentation: raw)
        if let mark = outcome.throttle { try settleThrottledGuess(mark, at: now()) }
        return UnlockedKey(privateKey: privateKey,
                           pin: UnlockedPIN(salt: record.salt, upgrade: try upgrade(record, key: key, pin: guess, privateKey: privateKey,
                                                                                    device: outcome.device),
                                            material: raw, tpmAuth: derivation.tpmAuth))
    }

    /// When the store's Argon2 cost is higher than the one this PIN record was made with, re-derives under it
    /// (a second KDF, once). Never lowers a record's cost: a lower or mixed setting leaves the record as it is.
    private func upgrade(_ record: AppPINRecord, key: UserKeyRecord, pin: SecretBytes,
                         privateKey: P256PrivateKey, device: DeviceRecord) throws -> PINUpgrade? {
        let current = Argon2Parameters(device)
        let made = Argon2Parameters(record)
        guard current != made, current.memoryKiB >= made.memoryKiB, current.iterations >= made.iterations,
              current.parallelism >= made.parallelism else { return nil }
        let salt = try SecureRandom.bytes(count: PINDerivation.saltLength)
        let derivation = try PINDerivation(pin: pin, salt: salt, parameters: current, kid: key.kid)
        let inner = try AESGCM.seal(privateKey.rawRepresentation, key: derivation.wrappingKey,
                                    aad: SealedSlot.pinWrappedPrivateKey(kid: key.kid, userId: key.userId).aad)
        return PINUpgrade(parameters: current, salt: salt, verifier: derivation.verifier, innerSealed: inner)
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
}
