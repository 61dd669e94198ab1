import Foundation

/// The JWS keymgr produces, shaped as the Ping SDKs produce them for PingAM's Device Binding and
/// Device Signing Verifier nodes.
enum JOSEClaims {
    /// Claim names a caller may not set: the SDKs refuse them with `invalidCustomClaims`.
    static let reserved: Set<String> = ["sub", "exp", "iat", "nbf", "iss", "challenge"]

    /// The binding JWS: the public JWK in the header, `platform` "linux" among the claims.
    static func bindingJWS(kid: String, jwk: JWK, userId: String, challenge: String, issuer: String, issuedAt: Date,
                           expiresIn: Int, key: some ES256Signer) throws -> String {
        let header: [String: JSONValue] = ["typ": "JWS", "alg": "ES256", "kid": .string(kid), "jwk": jwk.jsonObject()]
        var claims = standardClaims(userId: userId, challenge: challenge, issuer: issuer, issuedAt: issuedAt, expiresIn: expiresIn)
        claims["platform"] = "linux"
        return try JWS.sign(header: header, claims: claims, key: key)
    }

    /// The signing JWS: `alg`, `kid`, `typ` in the header; the standard claims plus the caller's custom claims.
    static func signingJWS(kid: String, userId: String, challenge: String, issuer: String, issuedAt: Date,
                           expiresIn: Int, custom: [String: JSONValue], key: some ES256Signer) throws -> String {
        let header: [String: JSONValue] = ["typ": "JWS", "alg": "ES256", "kid": .string(kid)]
        var claims = custom
        for (name, value) in standardClaims(userId: userId, challenge: challenge, issuer: issuer, issuedAt: issuedAt, expiresIn: expiresIn) {
            claims[name] = value
        }
        return try JWS.sign(header: header, claims: claims, key: key)
    }

    static func checkCustomClaims(_ claims: [String: JSONValue]) throws {
        let refused = claims.keys.filter(reserved.contains).sorted()
        guard refused.isEmpty else {
            throw KeyManagerError(.invalidCustomClaims, "custom claims may not use the reserved names \(refused.joined(separator: ", ")) "
                + "(reserved: \(reserved.sorted().joined(separator: ", "))): rename them")
        }
    }

    private static func standardClaims(userId: String, challenge: String, issuer: String, issuedAt: Date,
                                       expiresIn: Int) -> [String: JSONValue] {
        let iat = Int64(issuedAt.timeIntervalSince1970)
        return ["sub": .string(userId), "challenge": .string(challenge), "iss": .string(issuer),
                "iat": .int(iat), "nbf": .int(iat), "exp": .int(iat + Int64(expiresIn))]
    }
}
