import Foundation
import KeymgrCore

/// The checks PingAM's Device Binding and Device Signing Verifier nodes make on a JWS.
struct JWSChecks: Sendable {
    let verifier: any JWSVerifier
    let allowedIssuers: [String]
    let skew: TimeInterval
    let now: Date

    /// Binding: the signature verifies under the header `jwk`, whose `kid` equals the header `kid`;
    /// claims as in `checkClaims`, plus `platform`. Returns the JWK to store (string members only).
    func binding(_ jws: String, subject: String, challenge: String) throws -> [String: String] {
        let unverified = try verifier.decodeUnverified(jws)
        try checkAlgorithm(unverified.header)
        guard let kid = unverified.header["kid"]?.stringValue, !kid.isEmpty else {
            throw JWSRejection("the header has no kid")
        }
        guard let members = unverified.header["jwk"]?.objectValue else {
            throw JWSRejection("the header has no jwk")
        }
        var jwk: [String: String] = [:]
        for (name, value) in members {
            // A private member in a binding JWS would be a client bug worth refusing, not storing.
            guard name != "d" else { throw JWSRejection("the header jwk carries a private key") }
            if let text = value.stringValue { jwk[name] = text }
        }
        guard jwk["kid"] == kid else { throw JWSRejection("the header kid differs from the jwk kid") }
        guard jwk["kty"] == "EC", jwk["crv"] == "P-256" else { throw JWSRejection("the jwk is not a P-256 key") }
        let token = try verifier.verify(jws, publicJWK: jwk)
        try checkClaims(token.claims, subject: subject, challenge: challenge)
        guard let platform = token.claims["platform"]?.stringValue, !platform.isEmpty else {
            throw JWSRejection("the platform claim is missing")
        }
        return jwk
    }

    /// The header `kid` of a signing JWS, which names the stored key to verify with.
    func headerKid(_ jws: String) throws -> String {
        let unverified = try verifier.decodeUnverified(jws)
        guard let kid = unverified.header["kid"]?.stringValue, !kid.isEmpty else {
            throw JWSRejection("the header has no kid")
        }
        return kid
    }

    /// Signing: the signature verifies under the stored key; claims as in `checkClaims`.
    func signing(_ jws: String, key: [String: String], subject: String, challenge: String) throws {
        let unverified = try verifier.decodeUnverified(jws)
        try checkAlgorithm(unverified.header)
        let token = try verifier.verify(jws, publicJWK: key)
        try checkClaims(token.claims, subject: subject, challenge: challenge)
    }

    private func checkAlgorithm(_ header: JSONValue) throws {
        guard header["alg"]?.stringValue == "ES256" else { throw JWSRejection("alg is not ES256") }
    }

    /// `sub` is the user's universal id, `challenge` the one issued, `iss` an allowed application id,
    /// and `exp`, `nbf`, `iat` (seconds since the epoch) hold within the allowed skew.
    func checkClaims(_ claims: JSONValue, subject: String, challenge: String) throws {
        guard claims["sub"]?.stringValue == subject else { throw JWSRejection("sub is not the user") }
        guard let presented = claims["challenge"]?.stringValue, constantTimeEqual(presented, challenge) else {
            throw JWSRejection("challenge does not match")
        }
        guard let issuer = claims["iss"]?.stringValue, allowedIssuers.contains(issuer) else {
            throw JWSRejection("iss is not an allowed application id")
        }
        let current = now.timeIntervalSince1970
        guard let exp = seconds(claims["exp"]), let nbf = seconds(claims["nbf"]), let iat = seconds(claims["iat"])
        else { throw JWSRejection("exp, nbf and iat are required") }
        guard current <= exp + skew else { throw JWSRejection("the JWS has expired") }
        guard current >= nbf - skew else { throw JWSRejection("the JWS is not valid yet") }
        guard current >= iat - skew else { throw JWSRejection("the JWS was issued in the future") }
    }

    private func seconds(_ value: JSONValue?) -> Double? {
        switch value {
        case .int(let seconds): return Double(seconds)
        case .double(let seconds) where seconds.isFinite: return seconds
        default: return nil
        }
    }
}
