import Foundation
import KeyManager

/// A compact JWS taken apart: protected header and claims.
struct VerifiedToken: Sendable {
    var header: JSONValue
    var claims: JSONValue
}

/// Why a JWS was refused; the journey answers every one of them with PingAM's 401.
struct JWSRejection: Error, Sendable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What the journeys need from JOSE: decode a compact JWS without trusting it, and verify its ES256
/// signature under a public JWK.
protocol JWSVerifier: Sendable {
    /// Header and claims of `compact`, signature NOT checked.
    func decodeUnverified(_ compact: String) throws -> VerifiedToken
    /// Header and claims of `compact` after checking its ES256 signature under `publicJWK`.
    func verify(_ compact: String, publicJWK: [String: String]) throws -> VerifiedToken
}

/// The verifier the server runs with: keymgr's own `JWS` and `P256PublicKey` (OpenSSL underneath),
/// never crypto of the server's own.
struct KeyManagerJWSVerifier: JWSVerifier {
    func decodeUnverified(_ compact: String) throws -> VerifiedToken {
        VerifiedToken(try JWS.decode(compact))
    }

    func verify(_ compact: String, publicJWK: [String: String]) throws -> VerifiedToken {
        let jwk = JWK(
            kty: publicJWK["kty"], crv: publicJWK["crv"], x: publicJWK["x"], y: publicJWK["y"],
            use: publicJWK["use"], alg: publicJWK["alg"], kid: publicJWK["kid"])
        let publicKey = try P256PublicKey(jwk: jwk)
        return VerifiedToken(try JWS.verify(compact, publicKey: publicKey))
    }
}

extension VerifiedToken {
    init(_ decoded: DecodedJWS) {
        header = .object(decoded.header)
        claims = .object(decoded.claims)
    }
}
