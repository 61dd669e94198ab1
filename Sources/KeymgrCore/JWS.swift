/// JWS compact serialization (RFC 7515 §7.1), ES256 only: the shapes both sides of the wire read.
///
/// Signing and verifying are KeyManager's (`Crypto/JWS.swift`, with its P-256 keys); the reference server verifies
/// with a path of its own.
package enum JWS {
    /// The one signature algorithm keymgr signs and accepts.
    package static let algorithm = "ES256"

    /// Takes a compact JWS apart without checking its signature. Throws `.badInput` unless it has exactly
    /// three base64url parts and its header and payload are JSON objects.
    package static func decode(_ compact: String) throws -> DecodedJWS {
        let parts = compact.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw KeyManagerError(.badInput, "malformed JWS: expected three dot-separated parts")
        }
        guard let headerBytes = Base64URL.decode(String(parts[0])),
            let payloadBytes = Base64URL.decode(String(parts[1])),
            let signature = Base64URL.decode(String(parts[2]))
        else { throw KeyManagerError(.badInput, "malformed JWS: a part is not base64url") }
        guard let header = JSONValue.parseObject(headerBytes) else {
            throw KeyManagerError(.badInput, "malformed JWS: the header is not a JSON object")
        }
        guard let claims = JSONValue.parseObject(payloadBytes) else {
            throw KeyManagerError(.badInput, "malformed JWS: the payload is not a JSON object")
        }
        let signingInput = Array(parts[0].utf8) + [UInt8(ascii: ".")] + Array(parts[1].utf8)
        return DecodedJWS(header: header, claims: claims, signingInput: signingInput, signature: signature)
    }

    /// The message of the `.badInput` error a verifier throws for a wrong signature.
    package static let signatureDoesNotVerifyMessage = "JWS signature does not verify"
}

/// A compact JWS taken apart. Its signature has not been checked unless it came from a verifier.
package struct DecodedJWS: Sendable, Equatable {
    /// The protected header.
    package let header: [String: JSONValue]
    /// The payload, a JSON object of claims.
    package let claims: [String: JSONValue]
    /// The ASCII bytes of `BASE64URL(header) "." BASE64URL(payload)` that the signature covers.
    package let signingInput: [UInt8]
    /// The signature bytes (raw `r || s` for ES256).
    package let signature: [UInt8]
}
