/// JWS compact serialization (RFC 7515 §7.1), ES256 only.
package enum JWS {
    /// The one signature algorithm keymgr signs and accepts.
    package static let algorithm = "ES256"

    /// Signs `claims` under `header` with ES256 and returns the compact JWS.
    ///
    /// Header and payload are encoded as canonical JSON (sorted keys, no whitespace). `header` must contain
    /// `"alg": "ES256"`; otherwise this throws `.badInput`.
    package static func sign(
        header: [String: JSONValue], claims: [String: JSONValue], key: some ES256Signer
    ) throws -> String {
        guard header["alg"] == .string(algorithm) else {
            throw KeyManagerError(.badInput, "a JWS header must say \"alg\": \"ES256\"")
        }
        let encodedHeader = Base64URL.encode(Array(JSONValue.object(header).canonicalJSON().utf8))
        let encodedPayload = Base64URL.encode(Array(JSONValue.object(claims).canonicalJSON().utf8))
        let signingInput = encodedHeader + "." + encodedPayload
        let signature = try key.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

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

    /// Decodes `compact` and checks its ES256 signature under `publicKey`.
    ///
    /// Throws `.badInput` when the JWS is malformed, its `alg` is not ES256, it has a `crit` header
    /// (no extensions are understood), or with "JWS signature does not verify" when the signature is wrong.
    package static func verify(_ compact: String, publicKey: P256PublicKey) throws -> DecodedJWS {
        let decoded = try decode(compact)
        guard decoded.header["alg"] == .string(algorithm) else {
            throw KeyManagerError(.badInput, "JWS alg must be ES256")
        }
        guard decoded.header["crit"] == nil else {
            throw KeyManagerError(.badInput, "JWS has critical header extensions keymgr does not understand")
        }
        guard publicKey.isValidSignature(decoded.signature, for: decoded.signingInput) else {
            throw KeyManagerError(.badInput, signatureDoesNotVerifyMessage)
        }
        return decoded
    }

    /// The message of the `.badInput` error `verify` throws for a wrong signature.
    package static let signatureDoesNotVerifyMessage = "JWS signature does not verify"
}

/// A compact JWS taken apart. Its signature has not been checked unless it came from `JWS.verify`.
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
