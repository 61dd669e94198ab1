import Foundation

/// A Dynamic Client Registration (RFC 7591/7592) of one user at one server, without its secrets.
public struct Registration: Sendable, Equatable {
    public var userId: String
    public var serverName: String
    public var clientId: String
    public var registrationClientURI: URL?
    public var clientIdIssuedAt: Date?
    /// nil when the secret never expires (`client_secret_expires_at` 0) or the server said nothing.
    public var clientSecretExpiresAt: Date?
    public var tokenEndpointAuthMethod: String?
    public var grantTypes: [String]
    public var scope: String?
    public var softwareId: String?
    /// Every other non-secret member of the server's answer, kept as the server sent it.
    public var metadata: [String: JSONValue]
    /// Whether a client secret / registration access token is held (sealed).
    public var hasClientSecret: Bool
    public var hasRegistrationAccessToken: Bool
    /// The server refused the registration access token other than with 401 (400 `access_denied`, 403): the client
    /// is probably gone there. Sync stops asking; `keymgr dcr forget` removes the registration here.
    public var refusedByServer: Bool = false
    public var createdAt: Date
    public var updatedAt: Date
}

/// The secrets of a registration: opened only when a command needs them or `--reveal` asks.
public struct RegistrationSecrets: Sendable, Equatable {
    public var clientSecret: String?
    public var registrationAccessToken: String?
}

/// Device context sent as registration metadata (Curity's risk assessment reads such context).
public struct DeviceContext: Sendable, Equatable {
    public var deviceId: String
    public var deviceName: String
    public var osName: String
    public var osVersion: String
    public var model: String
}

/// The OAuth tokens of one user at one server, without the token strings.
public struct TokenSet: Sendable, Equatable {
    public var userId: String
    public var serverName: String
    public var clientId: String
    /// `DPoP` or `Bearer`.
    public var tokenType: String
    public var scope: String?
    public var expiresAt: Date?
    /// RFC 7638 thumbprint of the DPoP key, when the tokens are bound to one.
    public var jkt: String?
    public var hasRefreshToken: Bool
    public var hasIdToken: Bool
    public var updatedAt: Date
    /// Changes whenever the stored tokens change: how a refresh that waited for another process's lock finds
    /// out that process already refreshed.
    public var revision: String

    /// Whether the tokens are sender-constrained by a DPoP key.
    public var bound: Bool { jkt != nil && tokenType == "DPoP" }
}

/// The token strings: opened only when a command needs them or `--reveal` asks.
public struct TokenSecrets: Sendable, Equatable {
    public var accessToken: String?
    public var refreshToken: String?
    public var idToken: String?
}

/// A user's DPoP key (RFC 9449): a P-256 key separate from the binding key, that signs proofs.
public struct DPoPKey: Sendable {
    let privateKey: P256PrivateKey
    /// The public key as it goes in a proof's header: `kty`, `crv`, `x`, `y`.
    public let jwk: JWK
    /// Its RFC 7638 thumbprint, the `jkt` tokens are bound to.
    public let thumbprint: String

    init(_ privateKey: P256PrivateKey) throws {
        self.privateKey = privateKey
        self.jwk = privateKey.publicKey.jwk(kid: nil, use: nil, alg: nil)
        self.thumbprint = try jwk.thumbprint()
    }

    /// A fresh key, held only in memory until tokens bound to it are stored.
    public static func generate() throws -> DPoPKey {
        try DPoPKey(try P256PrivateKey.generate())
    }

    /// A DPoP proof: header `typ` `dpop+jwt`, `alg` ES256, `jwk`; claims `jti`, `htm`, `htu` (without query
    /// and fragment), `iat`, `ath` (with an access token) and `nonce` (when the server sent one).
    public func proof(htm: String, htu: URL, nonce: String?, accessToken: String?, at date: Date = Date()) throws -> String {
        let header: [String: JSONValue] = ["typ": "dpop+jwt", "alg": "ES256", "jwk": jwk.jsonObject()]
        var claims: [String: JSONValue] = [
            "jti": .string(Base64URL.encode(try SecureRandom.bytes(count: 16))),
            "htm": .string(htm.uppercased()),
            "htu": .string(Self.htu(htu)),
            "iat": .int(Int64(date.timeIntervalSince1970)),
        ]
        if let accessToken { claims["ath"] = .string(Base64URL.encode(SHA256.hash(Array(accessToken.utf8)))) }
        if let nonce { claims["nonce"] = .string(nonce) }
        return try JWS.sign(header: header, claims: claims, key: privateKey)
    }

    /// The URL without query and fragment (RFC 9449 §4.2).
    public static func htu(_ url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url.absoluteString }
        components.query = nil
        components.fragment = nil
        return components.string ?? url.absoluteString
    }
}
