import Foundation
import Storage

// Registrations (RFC 7591/7592), OAuth tokens and DPoP keys: every secret sealed under a master-derived purpose
// key with AAD naming the table, column, user and server; every change in one transaction with its audit entry.

extension KeyManager {
    /// The members of a registration answer that are secrets: sealed, never kept in `metadata`.
    static let registrationSecretMembers: Set<String> = ["client_secret", "registration_access_token"]
    /// The members with columns of their own.
    static let registrationColumns: Set<String> = [
        "client_id", "registration_client_uri", "client_id_issued_at", "client_secret_expires_at",
        "token_endpoint_auth_method", "grant_types", "scope", "software_id",
    ]

    /// The device's name and platform, as registration metadata carries them.
    public func deviceContext() throws -> DeviceContext {
        let device = try device()
        return DeviceContext(deviceId: device.deviceId, deviceName: device.deviceName, osName: device.osName,
                             osVersion: device.osVersion, model: device.model)
    }

    /// Stores a registration answer (RFC 7591 §3.2.1, or a RFC 7592 read): every member is kept, the client secret
    /// and registration access token sealed. A read that rotated them replaces both in the same transaction; a
    /// member the answer leaves out keeps its stored value.
    @discardableResult
    public func saveRegistration(userId: String, serverName: String, answer: [String: JSONValue],
                                 event: String = "dcr.registered") throws -> Registration {
        try authorize(userId: userId)
        let parsed = try RegistrationAnswer(answer)
        let clientId = parsed.clientId
        let at = now()
        let secretSlot = SealedSlot.registrationSecret("client_secret", userId: userId, serverName: serverName)
        let tokenSlot = SealedSlot.registrationSecret("registration_access_token", userId: userId, serverName: serverName)
        let (authMethod, grantTypes, extra) = (parsed.tokenEndpointAuthMethod, parsed.grantTypes, parsed.extra)
        return try write { writer in
            // Sealed inside the transaction, under the master key it checked: a rotation elsewhere that committed
            // since this process loaded its key makes `write` reload the key and run this again.
            let clientSecret = try parsed.clientSecret.map { try hierarchy.seal(SecretBytes(utf8: $0), in: secretSlot) }
            let accessToken = try parsed.registrationAccessToken.map { try hierarchy.seal(SecretBytes(utf8: $0), in: tokenSlot) }
            let clientIdHMAC = try hierarchy.auditIdentifier(clientId)
            try writer.upsertUser(userId: userId, username: nil, at: at)
            let existing = try writer.registration(userId: userId, serverName: serverName)
            if let existing, existing.clientId != clientId, event != "dcr.registered" {
                throw KeyManagerError(.badInput, "the server answered for another client than the one registered")
            }
            let keep = existing?.clientId == clientId ? existing : nil
            var mergedMetadata = keep.flatMap { Self.metadataObject($0.metadata) } ?? [:]
            for (name, value) in extra { mergedMetadata[name] = value }
            let record = RegistrationRecord(
                userId: userId, serverName: serverName, clientId: clientId,
                sealedClientSecret: clientSecret ?? keep?.sealedClientSecret,
                sealedRegistrationAccessToken: accessToken ?? keep?.sealedRegistrationAccessToken,
                registrationClientUri: parsed.registrationClientURI ?? keep?.registrationClientUri,
                clientIdIssuedAt: parsed.clientIdIssuedAt ?? keep?.clientIdIssuedAt,
                clientSecretExpiresAt: parsed.clientSecretExpiresAt ?? keep?.clientSecretExpiresAt,
                tokenEndpointAuthMethod: authMethod ?? keep?.tokenEndpointAuthMethod,
                grantTypes: grantTypes ?? keep?.grantTypes, scope: parsed.scope ?? keep?.scope,
                softwareId: parsed.softwareId ?? keep?.softwareId,
                metadata: JSONValue.object(mergedMetadata).canonicalJSON(), status: "active",
                createdAt: keep?.createdAt ?? at, updatedAt: at)
            if existing != nil, keep == nil {
                // A new client replaces an old one: the old client's tokens are useless now.
                try writer.deleteTokenSet(userId: userId, serverName: serverName)
            }
            try writer.save(record)
            try writer.appendAudit(auditEvent(event, userId: userId, details: [
                "server": .string(serverName), "clientIdHmac": .string(clientIdHMAC),
                "rotated": .bool(clientSecret != nil || accessToken != nil),
            ]))
            return Self.registration(record)
        }
    }

    /// The user's registration at the server, without secrets; nil when there is none.
    public func registration(userId: String, serverName: String) throws -> Registration? {
        try authorize(userId: userId)
        return try read { try $0.registration(userId: userId, serverName: serverName) }.map(Self.registration)
    }

    /// Every registration on this device (sync rule 5 reads each one's management endpoint).
    /// Under the agent's policy, only those of users in its scope.
    public func registrations() throws -> [Registration] {
        let allowed = try usersInScope()
        return try read { try $0.registrations() }.map(Self.registration).filter { allowed?.contains($0.userId) ?? true }
    }

    /// Opens the registration's secrets.
    public func registrationSecrets(userId: String, serverName: String) throws -> RegistrationSecrets {
        try authorize(userId: userId)
        let open = { (sealed: Data?, column: String) throws -> String? in
            try sealed.map { String(decoding: try self.openSealed($0, .registrationSecret(column, userId: userId, serverName: serverName)).bytes, as: UTF8.self) }
        }
        // Opened inside the read: a value that does not open because a rotation elsewhere committed since this
        // process loaded its key makes `read` reload the key and read again.
        let secrets = try read { reader -> RegistrationSecrets? in
            try refuseIfTampered(try Self.requireDevice(reader), userId: userId)
            return try reader.registration(userId: userId, serverName: serverName).map { record in
                RegistrationSecrets(clientSecret: try open(record.sealedClientSecret, "client_secret"),
                                    registrationAccessToken: try open(record.sealedRegistrationAccessToken, "registration_access_token"))
            }
        }
        guard let secrets else { throw Self.noRegistration(userId) }
        return secrets
    }

    /// The user's registration at the server profile `profile`, its secrets opened when `revealing` (`dcr show`).
    /// - Throws: `clientNotRegistered` when there is no such profile or the user has no registration there.
    public func clientRegistration(userId: String, profile: String, revealing: Bool) throws
        -> (registration: Registration, secrets: RegistrationSecrets?) {
        guard let settings = try serverSettings(name: profile) else {
            throw profile == "default" ? Self.noRegistration(userId) : Self.noProfile(profile)
        }
        guard let registration = try registration(userId: userId, serverName: settings.name) else {
            throw Self.noRegistration(userId)
        }
        return (registration, revealing ? try registrationSecrets(userId: userId, serverName: settings.name) : nil)
    }

    /// A named server profile that does not exist (66, as in every command that takes `--profile`).
    static func noProfile(_ name: String) -> KeyManagerError {
        KeyManagerError(.clientNotRegistered, "there is no server profile \(name): see `keymgr server list`")
    }

    static func noRegistration(_ userId: String) -> KeyManagerError {
        KeyManagerError(.clientNotRegistered, "\(userId) has no client registration: run `keymgr dcr register --user \(userId) …`")
    }

    /// Removes the user's registration at the server together with its tokens and DPoP key, in one transaction,
    /// audited as `event` with `reason`. Returns false when there was nothing to remove.
    @discardableResult
    public func wipeRegistration(userId: String, serverName: String, event: String, reason: String) throws -> Bool {
        try authorize(userId: userId)
        return try write { writer in
            let registration = try writer.registration(userId: userId, serverName: serverName)
            let tokens = try writer.tokenSet(userId: userId, serverName: serverName)
            guard registration != nil || tokens != nil else { return false }
            try writer.deleteRegistration(userId: userId, serverName: serverName)
            try writer.deleteTokenSet(userId: userId, serverName: serverName)
            try writer.appendAudit(auditEvent(event, userId: userId, details: [
                "server": .string(serverName), "reason": .string(reason),
                "registration": .bool(registration != nil), "tokens": .bool(tokens != nil),
            ]))
            return true
        }
    }

    /// Records that the server refused the registration's access token other than with 401 (`reason` says how):
    /// the registration stays, marked (status `revoked`), so sync reports it once and stops asking; audited.
    /// Returns false when the user has no registration at the server or it was already marked.
    @discardableResult
    public func markRegistrationRefused(userId: String, serverName: String, reason: String) throws -> Bool {
        try authorize(userId: userId)
        let at = now()
        return try write { writer in
            guard var record = try writer.registration(userId: userId, serverName: serverName), record.status != "revoked" else {
                return false
            }
            record.status = "revoked"
            record.updatedAt = at
            try writer.save(record)
            try writer.appendAudit(auditEvent("dcr.refusedByServer", userId: userId, details: [
                "server": .string(serverName), "reason": .string(reason),
            ]))
            return true
        }
    }

    /// What a registration answer says, in the store's terms: the parsing half of `saveRegistration`, with no store
    /// and nothing sealed (so `make fuzz` can feed it anything).
    struct RegistrationAnswer {
        var clientId: String
        var clientSecret: String?
        var registrationAccessToken: String?
        var registrationClientURI: String?
        var clientIdIssuedAt: Int64?
        var clientSecretExpiresAt: Int64?
        /// A string, or from an array (some servers send one) `client_secret_basic` if listed, else the first.
        var tokenEndpointAuthMethod: String?
        /// `grant_types` as canonical JSON text.
        var grantTypes: String?
        var scope: String?
        var softwareId: String?
        /// Every other member (the metadata column), plus an array-shaped `token_endpoint_auth_method` as sent.
        var extra: [String: JSONValue]

        init(_ answer: [String: JSONValue]) throws {
            guard let clientId = answer["client_id"]?.stringValue, !clientId.isEmpty else {
                throw KeyManagerError(.badInput, "the registration answer has no client_id")
            }
            self.clientId = clientId
            clientSecret = answer["client_secret"]?.stringValue
            registrationAccessToken = answer["registration_access_token"]?.stringValue
            registrationClientURI = answer["registration_client_uri"]?.stringValue
            clientIdIssuedAt = answer["client_id_issued_at"]?.intValue
            clientSecretExpiresAt = answer["client_secret_expires_at"]?.intValue
            tokenEndpointAuthMethod = {
                let value = answer["token_endpoint_auth_method"]
                if let text = value?.stringValue { return text }
                let methods = value?.arrayValue?.compactMap(\.stringValue) ?? []
                return methods.first { $0 == "client_secret_basic" } ?? methods.first
            }()
            grantTypes = answer["grant_types"]?.arrayValue.map { JSONValue.array($0).canonicalJSON() }
            scope = answer["scope"]?.stringValue
            softwareId = answer["software_id"]?.stringValue
            extra = answer.filter { !KeyManager.registrationSecretMembers.contains($0.key) && !KeyManager.registrationColumns.contains($0.key) }
            if let value = answer["token_endpoint_auth_method"], value.arrayValue != nil {
                extra["token_endpoint_auth_method"] = value  // the server's own shape, kept beside the chosen method
            }
        }
    }

    static func metadataObject(_ json: String) -> [String: JSONValue]? {
        (try? JSONDecoder().decode(JSONValue.self, from: Data(json.utf8)))?.objectValue
    }

    static func registration(_ record: RegistrationRecord) -> Registration {
        let grantTypes = record.grantTypes.flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) } ?? []
        return Registration(
            userId: record.userId, serverName: record.serverName, clientId: record.clientId,
            registrationClientURI: record.registrationClientUri.flatMap(URL.init(string:)),
            clientIdIssuedAt: record.clientIdIssuedAt.map { Date(timeIntervalSince1970: TimeInterval($0)) },
            clientSecretExpiresAt: record.clientSecretExpiresAt.flatMap { $0 == 0 ? nil : Date(timeIntervalSince1970: TimeInterval($0)) },
            tokenEndpointAuthMethod: record.tokenEndpointAuthMethod, grantTypes: grantTypes, scope: record.scope,
            softwareId: record.softwareId, metadata: metadataObject(record.metadata) ?? [:],
            hasClientSecret: record.sealedClientSecret != nil,
            hasRegistrationAccessToken: record.sealedRegistrationAccessToken != nil,
            refusedByServer: record.status == "revoked", createdAt: record.createdAt, updatedAt: record.updatedAt)
    }
}

extension KeyManager {
    /// Stores tokens the server issued, with the DPoP key they are bound to, replacing the user's previous set in
    /// one transaction. A refresh answer without a new refresh token keeps the stored one (RFC 6749 §6).
    /// `serverClockOffset` (seconds the server is ahead of this device) puts `expiresAt` on the server's clock.
    @discardableResult
    public func storeTokens(userId: String, serverName: String, clientId: String, issued: IssuedTokens,
                            dpopKey: DPoPKey?, event: String, serverClockOffset: TimeInterval = 0) throws -> TokenSet {
        try authorize(userId: userId)
        guard issued.tokenType == "DPoP" || issued.tokenType == "Bearer" else {
            throw KeyManagerError(.badInput, "token_type must be DPoP or Bearer, not \(issued.tokenType)")
        }
        let at = now()
        let slot = { (column: String) in SealedSlot.tokenSecret(column, userId: userId, serverName: serverName) }
        return try write { writer in
            // Sealed inside the transaction, under the master key it checked (see saveRegistration).
            let access = try hierarchy.seal(SecretBytes(utf8: issued.accessToken), in: slot("access_token"))
            let refresh = try issued.refreshToken.map { try hierarchy.seal(SecretBytes(utf8: $0), in: slot("refresh_token")) }
            let idToken = try issued.idToken.map { try hierarchy.seal(SecretBytes(utf8: $0), in: slot("id_token")) }
            let sealedKey = try dpopKey.map { try hierarchy.seal($0.privateKey.rawRepresentation, in: slot("dpop_key")) }
            try writer.upsertUser(userId: userId, username: nil, at: at)
            let existing = try writer.tokenSet(userId: userId, serverName: serverName)
            let sameClient = existing?.clientId == clientId ? existing : nil
            let record = TokenRecord(
                userId: userId, serverName: serverName, clientId: clientId, tokenType: issued.tokenType,
                sealedAccessToken: access, sealedRefreshToken: refresh ?? sameClient?.sealedRefreshToken,
                sealedIdToken: idToken ?? sameClient?.sealedIdToken, scope: issued.scope ?? sameClient?.scope,
                expiresAt: issued.expiresIn.map { at.addingTimeInterval(serverClockOffset + TimeInterval($0)) },
                jkt: dpopKey?.thumbprint, sealedDpopKey: sealedKey, updatedAt: at)
            try writer.save(record)
            try writer.appendAudit(auditEvent(event, userId: userId, details: [
                "server": .string(serverName), "tokenType": .string(issued.tokenType), "bound": .bool(dpopKey != nil),
                "refreshTokenRotated": .bool(refresh != nil),
            ]))
            return Self.tokenSet(record)
        }
    }

    /// The user's tokens at the server, without the token strings; nil when there are none.
    public func tokenSet(userId: String, serverName: String) throws -> TokenSet? {
        try authorize(userId: userId)
        return try read { try $0.tokenSet(userId: userId, serverName: serverName) }.map(Self.tokenSet)
    }

    /// Opens the token strings.
    public func tokenSecrets(userId: String, serverName: String) throws -> TokenSecrets {
        try authorize(userId: userId)
        let open = { (sealed: Data?, column: String) throws -> String? in
            try sealed.map { String(decoding: try self.openSealed($0, .tokenSecret(column, userId: userId, serverName: serverName)).bytes, as: UTF8.self) }
        }
        // Opened inside the read (see registrationSecrets).
        let secrets = try read { reader -> TokenSecrets? in
            try refuseIfTampered(try Self.requireDevice(reader), userId: userId)
            return try reader.tokenSet(userId: userId, serverName: serverName).map { record in
                TokenSecrets(accessToken: try open(record.sealedAccessToken, "access_token"),
                             refreshToken: try open(record.sealedRefreshToken, "refresh_token"),
                             idToken: try open(record.sealedIdToken, "id_token"))
            }
        }
        guard let secrets else { throw Self.noTokens(userId) }
        return secrets
    }

    /// The user's tokens at the server profile `profile`, the token strings opened when `revealing` (`token show`).
    /// - Throws: `clientNotRegistered` when there is no such profile or the user has no tokens there.
    public func tokens(userId: String, profile: String, revealing: Bool) throws -> (set: TokenSet, secrets: TokenSecrets?) {
        guard let settings = try serverSettings(name: profile) else {
            throw profile == "default" ? Self.noTokens(userId) : Self.noProfile(profile)
        }
        guard let set = try tokenSet(userId: userId, serverName: settings.name) else {
            throw Self.noTokens(userId)
        }
        return (set, revealing ? try tokenSecrets(userId: userId, serverName: settings.name) : nil)
    }

    static func noTokens(_ userId: String) -> KeyManagerError {
        KeyManagerError(.clientNotRegistered, "\(userId) has no tokens: run `keymgr login --user \(userId)`")
    }

    /// The DPoP key the user's tokens are bound to; nil when they are not bound.
    public func dpopKey(userId: String, serverName: String) throws -> DPoPKey? {
        try authorize(userId: userId)
        // Opened inside the read (see registrationSecrets).
        let raw = try read { reader -> SecretBytes? in
            guard let sealed = try reader.tokenSet(userId: userId, serverName: serverName)?.sealedDpopKey else { return nil }
            try refuseIfTampered(try Self.requireDevice(reader), userId: userId)
            return try openSealed(sealed, .tokenSecret("dpop_key", userId: userId, serverName: serverName))
        }
        guard let raw else { return nil }
        return try DPoPKey(try P256PrivateKey(rawRepresentation: raw))
    }

    /// Deletes the user's tokens and DPoP key (after `invalid_grant`, a revocation, a new login), audited.
    /// Returns false when there were none.
    @discardableResult
    public func discardTokens(userId: String, serverName: String, reason: String) throws -> Bool {
        try authorize(userId: userId)
        return try write { writer in
            guard try writer.tokenSet(userId: userId, serverName: serverName) != nil else { return false }
            try writer.deleteTokenSet(userId: userId, serverName: serverName)
            try writer.appendAudit(auditEvent("tokens.discarded", userId: userId, details: [
                "server": .string(serverName), "reason": .string(reason),
            ]))
            return true
        }
    }

    static func tokenSet(_ record: TokenRecord) -> TokenSet {
        let basis = (record.sealedRefreshToken ?? Data()) + (record.sealedAccessToken ?? Data())
        return TokenSet(userId: record.userId, serverName: record.serverName, clientId: record.clientId,
                        tokenType: record.tokenType, scope: record.scope, expiresAt: record.expiresAt, jkt: record.jkt,
                        hasRefreshToken: record.sealedRefreshToken != nil, hasIdToken: record.sealedIdToken != nil,
                        updatedAt: record.updatedAt, revision: Hex.encode(Array(SHA256.hash(Array(basis)).prefix(12))))
    }
}
