import Foundation
import KeymgrCore

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

/// The verifier the server runs with: its own ES256 check on libcrypto (`ServerCrypto`), never keymgr's `JWS.verify`
/// and `P256PublicKey`, so keymgr's signer is judged by code it does not share.
struct ServerJWSVerifier: JWSVerifier {
    func decodeUnverified(_ compact: String) throws -> VerifiedToken {
        VerifiedToken(try JWS.decode(compact))
    }

    func verify(_ compact: String, publicJWK: [String: String]) throws -> VerifiedToken {
        VerifiedToken(try Self.verified(compact, publicJWK: publicJWK))
    }

    /// `compact` taken apart after checking it is ES256 without critical extensions and that its signature verifies
    /// under the P-256 key `publicJWK` (`kty` EC, `crv` P-256, base64url `x` and `y`).
    static func verified(_ compact: String, publicJWK: [String: String]) throws -> DecodedJWS {
        let decoded = try JWS.decode(compact)
        guard decoded.header["alg"] == .string("ES256") else { throw JWSRejection("JWS alg must be ES256") }
        guard decoded.header["crit"] == nil else { throw JWSRejection("JWS has critical header extensions") }
        guard publicJWK["kty"] == "EC", publicJWK["crv"] == "P-256",
              let x = publicJWK["x"].flatMap(Base64URL.decode), let y = publicJWK["y"].flatMap(Base64URL.decode)
        else { throw JWSRejection("the key is not a P-256 public JWK") }
        guard ServerCrypto.isValidES256(signature: decoded.signature, message: decoded.signingInput, x: x, y: y) else {
            throw JWSRejection(JWS.signatureDoesNotVerifyMessage)
        }
        return decoded
    }
}

extension VerifiedToken {
    init(_ decoded: DecodedJWS) {
        header = .object(decoded.header)
        claims = .object(decoded.claims)
    }
}
