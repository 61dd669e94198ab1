import Foundation
import Storage

extension KeyManager {
    /// Binds a new key for a user: checks the auth type is usable here, verifies the user, generates a P-256 key,
    /// signs the binding JWS when a challenge is given, and in one transaction retires the user's previous key
    /// for the same issuer (superseded, key material destroyed, queued for deletion on the server) and stores the new one.
    public func bind(_ request: BindRequest, newPIN: SecretProvider) throws -> BindResult {
        try bind(request, newPIN: newPIN, event: "key.bound")
    }

    /// Binds a new key with a new auth type (or a new PIN after a lockout) in place of the user's current one.
    ///
    /// Under the agent's policy, another person's APPLICATION_PIN key is rebound only with its PIN (`currentPIN`),
    /// unless the deciding rule allows everything: see `rebindNeedsCurrentPIN`.
    public func rebind(userId: String, kid: String?, authType: AuthType, newPIN: SecretProvider,
                       currentPIN: SecretProvider? = nil) throws -> BindResult {
        let current = try selectKey(userId: userId, kid: kid, statuses: KeyStatus.usable, issuer: nil, verb: "rebind",
                                    using: false)
        try authorizeBinding(userId: current.key.userId, authType: authType)
        try requireOwnersPIN(current.key, pin: currentPIN)
        var request = BindRequest(userId: current.key.userId)
        request.username = current.username
        request.authType = authType
        request.issuer = current.key.issuer
        return try commit(try prepareBinding(request, newPIN: newPIN, replacing: current.key.kid), event: "key.rebound",
                          registeredAs: nil)
    }

    /// Whether `rebind` of this key needs the key's current PIN: under the agent's policy, another person's
    /// APPLICATION_PIN key (unless the deciding rule allows everything). The CLI asks for it first when so.
    package func rebindNeedsCurrentPIN(userId: String, kid: String?) throws -> Bool {
        guard context.scope != nil else { return false }
        let current = try selectKey(userId: userId, kid: kid, statuses: KeyStatus.usable, issuer: nil, verb: "rebind",
                                    using: false)
        return try needsOwnersPIN(current.key)
    }

    func bind(_ request: BindRequest, newPIN: SecretProvider, event: String) throws -> BindResult {
        try commit(try prepareBinding(request, newPIN: newPIN), event: event, registeredAs: nil)
    }

    /// Makes a new key for a binding the server must accept first (a journey): verifies the user, generates the
    /// key and signs the binding JWS, but writes nothing. The user's current key stays active until
    /// `commitBinding` stores the new one; `discardBinding` drops it when the server refuses.
    public func prepareBinding(_ request: BindRequest, newPIN: SecretProvider) throws -> PendingBinding {
        try prepareBinding(request, newPIN: newPIN, replacing: nil)
    }

    /// `prepareBinding`; `replacing`: the key a rebind replaces, whose PIN it has already proven when needed.
    func prepareBinding(_ request: BindRequest, newPIN: SecretProvider, replacing: String?) throws -> PendingBinding {
        try TextRules.checkUser(userId: request.userId, username: request.username)
        try authorizeBinding(userId: request.userId, authType: request.authType)
        let device = try device()
        let issuer = request.issuer ?? device.issuer
        try authorizeSuperseding(userId: request.userId, issuer: issuer, except: replacing)
        guard (1...3600).contains(request.expiresIn) else {
            throw KeyManagerError(.usage, "--expires-in must be between 1 and 3600 seconds")
        }
        let verification = verification(device)
        try verification.ensureUsable(request.authType)

        // Ask for the PIN (cheap to refuse) before anything slow; a biometric user proves presence now, as on a phone.
        let pin: SecretBytes? = request.authType == .applicationPIN ? try newPIN() : nil
        if let pin { try PINPolicy(minLength: device.pinMinLength).check(pin) }
        try verification.verify(request.authType, userId: request.userId, timeout: request.verifierTimeout)

        let kid = UUID().uuidString
        let backend = try newKeyBackend(device)
        let created = now()
        // The slow part (Argon2) happens here; what needs the master key is sealed inside the transaction below.
        var pinLayer: (parameters: Argon2Parameters, salt: [UInt8], verifier: SecretBytes, inner: [UInt8])?
        let newKey: NewKey
        if let pin {
            let parameters = Argon2Parameters(device)
            let salt = try SecureRandom.bytes(count: PINDerivation.saltLength)
            let derivation = try PINDerivation(pin: pin, salt: salt, parameters: parameters, kid: kid)
            newKey = try backend.makeKey(pinAuth: derivation.tpmAuth)
            let layer = try pinLayerMaterial(newKey.material, backend: backend, derivation: derivation, kid: kid,
                                             userId: request.userId)
            pinLayer = (parameters, salt, layer.verifier, layer.inner)
        } else {
            newKey = try backend.makeKey(pinAuth: nil)
        }
        let jwk = newKey.publicKey.jwk(kid: kid)

        var jws: String?
        if let challenge = request.challenge {
            jws = try JOSEClaims.bindingJWS(kid: kid, jwk: jwk, userId: request.userId, challenge: challenge,
                                            issuer: issuer, issuedAt: created, expiresIn: request.expiresIn, key: newKey.signer)
        }

        return PendingBinding(
            kid: kid, userId: request.userId, username: request.username, issuer: issuer, authType: request.authType,
            createdAt: created, backend: backend.kind, material: newKey.material,
            pinLayer: pinLayer.map {
                PendingBinding.PINLayer(parameters: $0.parameters, salt: $0.salt, verifier: $0.verifier,
                                        inner: $0.inner, pinRetry: device.pinRetry)
            },
            jwk: jwk, jws: jws)
    }

    /// Stores a binding the server accepted, registered under `deviceName`, in one transaction: the user's previous
    /// usable keys for the same issuer are superseded (material destroyed, queued for deletion on the server).
    ///
    /// `adopting`: the person's local identity user the journey's user is (`bob` for `id=bob,ou=user,…`): moved into
    /// the journey's, keys and all, in the same transaction, when that is safe (see `adopt`); else both stay.
    public func commitBinding(_ pending: PendingBinding, deviceName: String, adopting: String? = nil) throws -> BindResult {
        try commit(pending, event: "key.bound", registeredAs: deviceName, adopting: adopting)
    }

    /// Drops a binding the server refused: its key was never stored, so the user's current key stays as it was.
    /// Records the refusal in the audit log.
    public func discardBinding(_ pending: PendingBinding, reason: String) throws {
        try write { writer in
            try writer.appendAudit(auditEvent("key.bindingRefused", userId: pending.userId, kid: pending.kid,
                                              details: ["reason": .string(reason)]))
        }
        logger.debug("discarded a refused binding", metadata: ["kid": .string(pending.kid)])
    }

    private func commit(_ pending: PendingBinding, event: String, registeredAs deviceName: String?,
                        adopting: String? = nil) throws -> BindResult {
        let (kid, userId, created) = (pending.kid, pending.userId, pending.createdAt)
        let (record, username, owner, retiredAny) = try write { writer -> (UserKeyRecord, String?, String?, Bool) in
            // Sealed inside the transaction, under the master key the store holds now (a rotation may have run).
            let slot = SealedSlot.privateKey(kid: kid, userId: userId)
            let sealedKey = try pending.pinLayer.map { try hierarchy.seal(SecretBytes($0.inner), in: slot) }
                ?? hierarchy.seal(pending.material, in: slot)
            var row = UserKeyRecord(
                kid: kid, userId: userId, issuer: pending.issuer, authType: pending.authType.record,
                publicJwk: pending.jwk.jsonObject().canonicalJSON(), wrappedPrivateKey: sealedKey,
                status: .active, serverState: deviceName == nil ? .unregistered : .registered, deviceName: deviceName,
                createdAt: created)
            row.keyBackend = pending.backend.rawValue
            let record = row
            if let adopting { _ = try adopt(adopting, into: userId, issuer: pending.issuer, writer: writer, at: created) }
            // Decided again inside the transaction: another bind may have made (and linked) this user meanwhile.
            let reach = try self.reach(userId, in: writer)
            guard reach != .hidden else { throw noSuchUser(userId) }
            let scope = context.scope
            let existed = try writer.user(id: userId) != nil
            // A username is display text: a bind rewrites it only for the identity's owner (or embedded, or an
            // administrator whose rule allows everything), never for a shared account acting on someone else's.
            let mayRename = !existed || scope == nil || reach == .own || scope?.othersPINKeysNeedPIN == false
            try writer.upsertUser(userId: userId, username: mayRename ? pending.username : nil, at: created)
            if reach == .claimable, let scope, scope.bindLinksToCaller {
                try writer.insert(PersonLinkRecord(userId: userId, uid: scope.callerUid, login: scope.callerLogin,
                                                   linkedBy: .bind, createdAt: created))
                try writer.appendAudit(auditEvent("person.linked", userId: userId, details: [
                    "login": .string(scope.callerLogin), "uid": .int(Int64(scope.callerUid)), "reason": .string("bind"),
                ]))
            }
            let retired = try retireUsableKeys(writer, userId: userId, issuer: pending.issuer, supersededBy: kid, at: created)
            try writer.insert(record)
            if let pinLayer = pending.pinLayer {
                try writer.save(AppPINRecord(
                    kid: kid, argon2MemoryKib: pinLayer.parameters.memoryKiB, argon2Iterations: pinLayer.parameters.iterations,
                    argon2Parallelism: pinLayer.parameters.parallelism, salt: Data(pinLayer.salt),
                    verifier: try hierarchy.seal(pinLayer.verifier, in: .pinVerifier(kid: kid)),
                    pinRetry: pinLayer.pinRetry, updatedAt: created))
            }
            try writer.appendAudit(auditEvent(event, userId: userId, kid: kid, details: [
                "authType": .string(pending.authType.rawValue), "issuer": .string(pending.issuer),
                "supersedes": .array(retired.map(JSONValue.string)),
            ]))
            if deviceName != nil {
                try writer.appendAudit(auditEvent("key.registered", userId: userId, kid: kid))
            }
            return (record, try writer.user(id: userId)?.username, try writer.personLink(userId: userId)?.login, !retired.isEmpty)
        }
        // A superseded key's sealed blob must not linger in -wal either.
        if retiredAny { store.checkpointDestroyedData() }
        logger.debug("bound key", metadata: ["kid": .string(kid), "authType": .string(pending.authType.rawValue)])
        var key = UserKey(record, username: username)
        key.owner = owner
        return BindResult(key: key, jwk: pending.jwk, jws: pending.jws)
    }

    /// Revokes keys: the one `kid`, or every usable key of `userId`. Destroys their key material, PINs, and the
    /// user's tokens and registrations; keeps tombstone rows for the audit log and for sync to delete on the server.
    /// The keys `revoke(userId:kid:reason:)` would revoke, changing nothing: what a confirmation names.
    /// - Throws: `clientNotRegistered` when there is no such key, or the user has no active or locked key.
    public func revocationTargets(userId: String?, kid: String?) throws -> [UserKey] {
        try revocationTargetRows(userId: userId, kid: kid).map { UserKey($0.key, username: $0.username) }
    }

    /// Whether revoking what `userId`/`kid` name needs a PIN: under the agent's policy, when it includes another
    /// person's APPLICATION_PIN key (unless the deciding rule allows everything).
    package func revocationNeedsPIN(userId: String?, kid: String?) throws -> Bool {
        guard context.scope != nil else { return false }
        return try revocationTargetRows(userId: userId, kid: kid).contains { try needsOwnersPIN($0.key) }
    }

    /// The revocation targets with their usernames, each checked against the agent's policy.
    private func revocationTargetRows(userId: String?, kid: String?) throws -> [(key: UserKeyRecord, username: String?)] {
        guard userId != nil || kid != nil else { throw KeyManagerError(.usage, "name the key to revoke with --user or --kid") }
        if let userId, kid == nil { try authorize(userId: userId) }
        let targets = try read { reader in
            try Self.revocationTargets(userId: userId, kid: kid, in: reader, visible: try visibility(in: reader)).map {
                (key: $0, username: try reader.user(id: $0.userId)?.username)
            }
        }
        for target in targets { try authorize(target.key, using: false) }
        return targets
    }

    /// The active or locked keys `kid` (a kid or unique prefix) or else `userId` names.
    /// `visible`: whether the caller may see a user's keys (`visibility(in:)`); what it may not see is not there.
    static func revocationTargets(userId: String?, kid: String?, in reader: StoreReader,
                                  visible: (String) throws -> Bool) throws -> [UserKeyRecord] {
        var targets: [UserKeyRecord]
        if let kid {
            guard let key = try Self.key(named: kid, in: reader, visible: visible), userId == nil || key.userId == userId else {
                throw KeyManagerError(.clientNotRegistered, "no key \(kid)\(userId.map { " for user \($0)" } ?? "") on this device: see `keymgr list --status all`")
            }
            targets = [key]
        } else {
            targets = try userId.map(visible) ?? true ? try reader.keys(userId: userId, statuses: [.active, .locked]) : []
            if targets.isEmpty, let userId, try !visible(userId) || reader.user(id: userId) == nil {
                throw KeyManagerError(.clientNotRegistered, "no user \(userId) on this device: see `keymgr users`")
            }
        }
        targets = targets.filter { $0.status == .active || $0.status == .locked }
        guard !targets.isEmpty else {
            throw KeyManagerError(.clientNotRegistered, "\(kid.map { "key \($0)" } ?? "user \(userId ?? "")") has no active or locked key on this device: nothing to revoke")
        }
        return targets
    }

    ///
    /// Under the agent's policy, each key must be in scope, and another person's APPLICATION_PIN key needs its PIN
    /// (`pin`, asked only then) unless the deciding rule allows everything.
    public func revoke(userId: String?, kid: String?, reason: String?, pin: SecretProvider? = nil) throws -> [UserKey] {
        guard userId != nil || kid != nil else { throw KeyManagerError(.usage, "name the key to revoke with --user or --kid") }
        if context.scope != nil {
            // One PIN read, tried on each of the person's PIN keys being revoked.
            var given: SecretBytes?
            let once: SecretProvider? = pin.map { pin in {
                if let given { return given }
                let read = try pin()
                given = read
                return read
            } }
            for target in try revocationTargetRows(userId: userId, kid: kid) {
                try requireOwnersPIN(target.key, pin: once)
            }
        }
        let at = now()
        let reason = reason ?? "revoked by \(actor)"
        let revokedKeys = try write { writer in
            let targets = try Self.revocationTargets(userId: userId, kid: kid, in: writer, visible: try visibility(in: writer))
            var revoked: [UserKey] = []
            for var key in targets {
                destroy(&key, status: .revoked, reason: reason, at: at)
                try writer.update(key)
                try writer.deleteAppPIN(kid: key.kid)
                try writer.appendAudit(auditEvent("key.revoked", userId: key.userId, kid: key.kid,
                                                  details: ["reason": .string(reason)]))
                revoked.append(UserKey(key, username: try writer.user(id: key.userId)?.username))
            }
            for owner in Set(targets.map(\.userId)).sorted() {
                let tokens = try writer.deleteTokenSets(userId: owner)
                let registrations = try writer.deleteRegistrations(userId: owner)
                if tokens + registrations > 0 {
                    try writer.appendAudit(auditEvent("credentials.wiped", userId: owner, details: [
                        "tokenSets": .int(Int64(tokens)), "registrations": .int(Int64(registrations)),
                    ]))
                }
            }
            return revoked
        }
        // The revoked keys' sealed blobs must not linger in -wal (secure_delete zeroes them in the file).
        store.checkpointDestroyedData()
        return revokedKeys
    }

    /// The PIN layer of an APPLICATION_PIN key's material. Software: AES-GCM under the PIN's wrapping key, with the
    /// PIN's verifier. TPM: the blob as it is (the TPM checks the PIN's authValue) and a random verifier that no PIN
    /// matches, so that the store holds nothing a PIN can be checked against offline.
    func pinLayerMaterial(_ material: SecretBytes, backend: any KeyBackend, derivation: PINDerivation, kid: String,
                          userId: String) throws -> (verifier: SecretBytes, inner: [UInt8]) {
        switch backend.kind {
        case .software:
            return (derivation.verifier, try AESGCM.seal(material, key: derivation.wrappingKey,
                                                         aad: SealedSlot.pinWrappedPrivateKey(kid: kid, userId: userId).aad))
        case .tpm:
            return (SecretBytes(try SecureRandom.bytes(count: 32)), material.bytes)
        }
    }

    /// The keys `request` would supersede: the user's active and locked keys for the same issuer.
    public func keysSuperseded(by request: BindRequest) throws -> [UserKey] {
        let issuer = try request.issuer ?? device().issuer
        return try keys(userId: request.userId, statuses: KeyStatus.usable).filter { $0.issuer == issuer }
    }

    /// Marks the user's usable keys for `issuer` superseded (material destroyed, queued for server deletion).
    func retireUsableKeys(_ writer: StoreWriter, userId: String, issuer: String, supersededBy kid: String,
                          at: Date) throws -> [String] {
        var retired: [String] = []
        for var key in try writer.keys(userId: userId, statuses: [.active, .locked]) where key.issuer == issuer {
            destroy(&key, status: .superseded, reason: "superseded by \(kid)", at: at)
            try writer.update(key)
            try writer.deleteAppPIN(kid: key.kid)
            try writer.appendAudit(auditEvent("key.superseded", userId: userId, kid: key.kid,
                                              details: ["supersededBy": .string(kid)]))
            retired.append(key.kid)
        }
        return retired
    }

    /// Turns a key into a tombstone: no key material, and queued for deletion if the server knows it.
    func destroy(_ key: inout UserKeyRecord, status: UserKeyRecord.Status, reason: String, at: Date) {
        key.status = status
        key.wrappedPrivateKey = nil
        key.revokedAt = at
        key.revokeReason = reason
        if key.serverState == .registered { key.serverState = .pendingDeletion }
    }
}

/// A key made for a binding the server has not accepted yet (see `KeyManager.prepareBinding`): nothing of it is
/// stored; its private key exists only in memory until `commitBinding` seals it.
public struct PendingBinding: Sendable {
    /// The PIN layer derived while preparing (the slow Argon2 part), sealed under the master key at commit.
    struct PINLayer: Sendable {
        let parameters: Argon2Parameters
        let salt: [UInt8]
        let verifier: SecretBytes
        let inner: [UInt8]
        let pinRetry: Int
    }

    /// The new key's id.
    public let kid: String
    /// The user the key is for.
    public let userId: String
    let username: String?
    let issuer: String
    let authType: AuthType
    let createdAt: Date
    let backend: KeyBackendKind
    /// What is sealed under the master key when the key has no PIN layer: the software scalar or the TPM blob.
    let material: SecretBytes
    let pinLayer: PINLayer?
    /// The new key's public JWK.
    public let jwk: JWK
    /// The binding JWS for the server's challenge, when one was given.
    public let jws: String?
}
