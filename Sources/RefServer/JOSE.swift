import Foundation

/// A compact JWS taken apart: protected header and claims.
struct VerifiedToken: Sendable {
    var header: WireJSON
    var claims: WireJSON
}

/// Why a JWS was refused; the journey answers every one of them with PingAM's 401.
struct JWSRejection: Error, Sendable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What the journeys need from JOSE. The implementation wraps keymgr's `KeyManager.JWS` (never
/// crypto of the server's own): decode a compact JWS without trusting it, and verify its ES256
/// signature under a public JWK.
protocol JWSVerifier: Sendable {
    /// Header and claims of `compact`, signature NOT checked.
    func decodeUnverified(_ compact: String) throws -> VerifiedToken
    /// Header and claims of `compact` after checking its ES256 signature under `publicJWK`.
    func verify(_ compact: String, publicJWK: [String: String]) throws -> VerifiedToken
}

/// Stands in until keymgr's JOSE API is available: refuses every JWS, so no journey can succeed
/// on an unchecked signature.
struct UnavailableJWSVerifier: JWSVerifier {
    func decodeUnverified(_ compact: String) throws -> VerifiedToken {
        throw JWSRejection("JWS verification is not available in this build")
    }

    func verify(_ compact: String, publicJWK: [String: String]) throws -> VerifiedToken {
        throw JWSRejection("JWS verification is not available in this build")
    }
}
