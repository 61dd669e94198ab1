import Foundation
import Storage

/// What a token request needs of the user's stored tokens, from one read of their row: the set, its opened strings
/// and, when asked for, the DPoP key they are bound to.
public struct TokenState: Sendable {
    public let set: TokenSet
    public let secrets: TokenSecrets
    public let dpopKey: DPoPKey?
}

/// What a token or registration request needs of the user's client registration, from one read of its row.
public struct ClientState: Sendable {
    public let registration: Registration
    public let secrets: RegistrationSecrets
}

extension KeyManager {
    /// The user's tokens at the server with their strings opened (and the DPoP key when `withDPoPKey`), all from
    /// one read of the row; nil when there are none. What `tokenSet`, `tokenSecrets` and `dpopKey` give, read once.
    /// `releasing` (the strings go to the caller, as `token print`'s do) refuses while a tampering finding concerns
    /// the user; a refresh, which sends them only to the server, passes false and spares the device row's read.
    public func tokenState(userId: String, serverName: String, withDPoPKey: Bool, releasing: Bool = true) throws -> TokenState? {
        try authorize(userId: userId)
        let slot = { (column: String) in SealedSlot.tokenSecret(column, userId: userId, serverName: serverName) }
        let open = { (sealed: Data?, column: String) throws -> String? in
            try sealed.map { String(decoding: try self.openSealed($0, slot(column)).bytes, as: UTF8.self) }
        }
        // Opened inside the read (see registrationSecrets).
        let opened = try read { reader -> (TokenSet, TokenSecrets, SecretBytes?)? in
            guard let record = try reader.tokenSet(userId: userId, serverName: serverName) else { return nil }
            if releasing { try refuseIfTampered(try Self.requireDevice(reader), userId: userId) }
            let secrets = TokenSecrets(accessToken: try open(record.sealedAccessToken, "access_token"),
                                       refreshToken: try open(record.sealedRefreshToken, "refresh_token"),
                                       idToken: try open(record.sealedIdToken, "id_token"))
            let key = withDPoPKey ? try record.sealedDpopKey.map { try openSealed($0, slot("dpop_key")) } : nil
            return (Self.tokenSet(record), secrets, key)
        }
        guard let (set, secrets, raw) = opened else { return nil }
        return TokenState(set: set, secrets: secrets, dpopKey: try raw.map { try DPoPKey(try P256PrivateKey(rawRepresentation: $0)) })
    }

    /// The user's registration at the server with its secrets opened, from one read of the row; nil when there is
    /// none. What `registration` and `registrationSecrets` give, read once.
    public func clientState(userId: String, serverName: String) throws -> ClientState? {
        try authorize(userId: userId)
        let open = { (sealed: Data?, column: String) throws -> String? in
            try sealed.map {
                String(decoding: try self.openSealed($0, .registrationSecret(column, userId: userId, serverName: serverName)).bytes,
                       as: UTF8.self)
            }
        }
        return try read { reader -> ClientState? in
            try reader.registration(userId: userId, serverName: serverName).map { record in
                ClientState(registration: Self.registration(record),
                            secrets: RegistrationSecrets(clientSecret: try open(record.sealedClientSecret, "client_secret"),
                                                         registrationAccessToken: try open(record.sealedRegistrationAccessToken,
                                                                                           "registration_access_token")))
            }
        }
    }
}
